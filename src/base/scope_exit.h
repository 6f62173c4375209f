// ScopeExit: runs a function when the scope it was made in ends, on every way out (return or exception), for state
// that must be undone whatever happens (a key marked as being opened, say).
#pragma once

#include <utility>

namespace conccl {

template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F fn) : fn_(std::move(fn)) {}
  ~ScopeExit() { fn_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F fn_;
};

}  // namespace conccl
