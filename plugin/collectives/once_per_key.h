// Values made on first use, one per key, where making one waits on other
// processes (a communicator's rendezvous): each key is made under its own
// lock, never the map's, because processes may ask for different keys
// first and each making waits for its peers. A failed making is tried
// again on the next request.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "common/status.h"

namespace myplugin::collectives {

template <typename Key, typename T>
class OncePerKey {
 public:
  StatusOr<std::shared_ptr<T>> Get(const Key& key, const std::function<StatusOr<std::shared_ptr<T>>()>& make) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::shared_ptr<Slot>& s = slots_[key];
      if (!s) s = std::make_shared<Slot>();
      slot = s;
    }
    std::lock_guard<std::mutex> lock(slot->mu);
    if (!slot->value) {
      StatusOr<std::shared_ptr<T>> made = make();
      if (!made.ok()) return made.status();
      slot->value = made.take();
    }
    return slot->value;
  }

  // The value made for `key`, or null (none made, or one being made now).
  std::shared_ptr<T> Find(const Key& key) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = slots_.find(key);
      if (it == slots_.end()) return nullptr;
      slot = it->second;
    }
    std::unique_lock<std::mutex> slot_lock(slot->mu, std::try_to_lock);
    return slot_lock.owns_lock() ? slot->value : nullptr;
  }

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    slots_.clear();
  }

  // `f(value)` for every value made so far (one being made is skipped, not
  // waited for: its making may wait on a peer that is gone).
  void ForEach(const std::function<void(T&)>& f) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, slot] : slots_) {
      std::unique_lock<std::mutex> slot_lock(slot->mu, std::try_to_lock);
      if (slot_lock.owns_lock() && slot->value) f(*slot->value);
    }
  }

 private:
  struct Slot {
    std::mutex mu;
    std::shared_ptr<T> value;
  };
  std::mutex mu_;
  std::map<Key, std::shared_ptr<Slot>> slots_;
};

}  // namespace myplugin::collectives
