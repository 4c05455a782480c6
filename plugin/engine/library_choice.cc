#include "engine/library_choice.h"

#include <mutex>
#include <utility>

namespace myplugin {
namespace {

std::mutex& Mu() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

LibraryChoice& Choice() {
  // Leaked on purpose: read by engine loads that may run during static destruction.
  static LibraryChoice* choice = new LibraryChoice;
  return *choice;
}

}  // namespace

void SetLibraryChoice(LibraryChoice choice) {
  std::lock_guard<std::mutex> lock(Mu());
  Choice() = std::move(choice);
}

LibraryChoice CurrentLibraryChoice() {
  std::lock_guard<std::mutex> lock(Mu());
  return Choice();
}

}  // namespace myplugin
