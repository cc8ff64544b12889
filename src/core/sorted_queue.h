// The storage of a pending queue (docs/policy.md §7.1 says in what order; this file only keeps
// it): its entries sorted by key in one contiguous array, so that a walk over the queue reads
// memory in order. (A std::map's walk cost a cache miss or two per job: about half of a full
// cycle's time at 10,000 pending jobs, docs/benchmarks.md.) Speed only: the order and the
// entries are those a std::map would hold.
//
// Erasing leaves a tombstone, so that the iterators a walk holds stay valid while the walk starts
// jobs (each start erases the started job from its queue). Inserting moves entries and may
// reallocate: no iterator is held across an insert (jobs join a queue between cycles only).
// compact() sweeps the tombstones once they outnumber half the entries; the cycle calls it before
// it walks. Internal to src/core.
//
// Thread-safety: none; owned by the Scheduler.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace allot::core {

// Entries (key, T*) with unique keys, in key order; a null T* marks an erased entry.
template <class Key, class T>
class SortedQueue {
 public:
  using Entry = std::pair<Key, T*>;
  using value_type = Entry;

  template <bool Const>
  class Iter {
   public:
    using Item = std::conditional_t<Const, const Entry, Entry>;
    using iterator_category = std::forward_iterator_tag;
    using difference_type = std::ptrdiff_t;
    using value_type = Entry;
    using pointer = Item*;
    using reference = Item&;

    Iter() = default;
    Iter(Item* p, Item* end) : p_(p), end_(end) { skip(); }
    Item& operator*() const { return *p_; }
    Item* operator->() const { return p_; }
    Iter& operator++() {
      ++p_;
      skip();
      return *this;
    }
    Iter operator++(int) {
      Iter before = *this;
      ++*this;
      return before;
    }
    friend bool operator==(const Iter& a, const Iter& b) { return a.p_ == b.p_; }
    // The value k entries on (erased ones counted), or nullptr past the end or at an erased one:
    // what a walk may ask the memory for ahead of its turn.
    T* ahead(std::size_t k) const {
      return static_cast<std::size_t>(end_ - p_) > k ? p_[k].second : nullptr;
    }

   private:
    void skip() {
      while (p_ != end_ && p_->second == nullptr) ++p_;
    }
    Item* p_ = nullptr;
    Item* end_ = nullptr;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  std::size_t size() const { return v_.size() - dead_; }
  bool empty() const { return size() == 0; }

  iterator begin() { return {v_.data() + head_, v_.data() + v_.size()}; }
  iterator end() { return {v_.data() + v_.size(), v_.data() + v_.size()}; }
  const_iterator begin() const { return {v_.data() + head_, v_.data() + v_.size()}; }
  const_iterator end() const { return {v_.data() + v_.size(), v_.data() + v_.size()}; }

  // The first entry whose key is not less than `key`.
  const_iterator lower_bound(const Key& key) const {
    return {v_.data() + position(key), v_.data() + v_.size()};
  }
  iterator lower_bound(const Key& key) {
    return {v_.data() + position(key), v_.data() + v_.size()};
  }

  // Adds (key, value) unless the key is there; whether it was added.
  bool emplace(const Key& key, T* value) {
    std::size_t at = position(key);
    if (at < v_.size() && v_[at].first == key) {
      if (v_[at].second) return false;
      revive(at, value);  // the same key erased earlier: its place is kept
      return true;
    }
    if (at > 0 && v_[at - 1].second == nullptr) {
      // An erased entry just before: every key before `at` is less than `key`, so it may take
      // that place without moving anything.
      v_[at - 1].first = key;
      revive(at - 1, value);
      return true;
    }
    v_.insert(v_.begin() + static_cast<std::ptrdiff_t>(at), Entry{key, value});
    if (at <= head_) head_ = at;  // everything before it is erased (or there is nothing)
    return true;
  }

  // Erases the entry of `key`; whether there was one.
  bool erase(const Key& key) {
    const std::size_t at = position(key);
    if (at == v_.size() || !(v_[at].first == key) || v_[at].second == nullptr) return false;
    v_[at].second = nullptr;
    ++dead_;
    if (at == head_) {
      while (head_ < v_.size() && v_[head_].second == nullptr) ++head_;
    }
    return true;
  }

  // Sweeps the tombstones once they outnumber half the entries (so that a walk skips few):
  // invalidates every iterator.
  void compact() {
    if (dead_ == 0 || dead_ * 2 < v_.size()) return;
    std::erase_if(v_, [](const Entry& e) { return e.second == nullptr; });
    dead_ = 0;
    head_ = 0;
  }

 private:
  std::size_t position(const Key& key) const {
    return static_cast<std::size_t>(
        std::lower_bound(v_.begin(), v_.end(), key,
                         [](const Entry& e, const Key& k) { return e.first < k; }) -
        v_.begin());
  }

  void revive(std::size_t at, T* value) {
    v_[at].second = value;
    --dead_;
    if (at < head_) head_ = at;
  }

  std::vector<Entry> v_;  // sorted by key, erased entries included
  std::size_t dead_ = 0;  // erased entries in v_
  std::size_t head_ = 0;  // every entry before it is erased
};

}  // namespace allot::core
