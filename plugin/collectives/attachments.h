// Objects of the floors above the runtime's owner (pjrt/, spmd/), one per
// type, made on first use and held by the owner (process_runtime.h), which
// cannot name their types: they are stored type-erased, keyed by type.
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>

namespace myplugin::collectives {

class Attachments {
 public:
  // The one T of this holder, default-constructed on the first call from any
  // thread. T's constructor may attach another type; not T itself.
  template <class T>
  T& Get() {
    const std::type_index key(typeid(T));
    if (T* found = Find<T>(key)) return *found;
    // One construction at a time, so two first uses make one T; recursive,
    // for a constructor that attaches another type.
    std::lock_guard<std::recursive_mutex> making(make_mu_);
    if (T* found = Find<T>(key)) return *found;
    std::shared_ptr<void> made = std::make_shared<T>();
    std::unique_lock<std::shared_mutex> lock(mu_);
    objects_.emplace(key, made);
    return *static_cast<T*>(made.get());
  }

 private:
  template <class T>
  T* Find(const std::type_index& key) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = objects_.find(key);
    return it == objects_.end() ? nullptr : static_cast<T*>(it->second.get());
  }

  std::recursive_mutex make_mu_;
  std::shared_mutex mu_;
  std::unordered_map<std::type_index, std::shared_ptr<void>> objects_;  // under mu_
};

}  // namespace myplugin::collectives
