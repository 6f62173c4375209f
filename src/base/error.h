// One error model: exceptions inside the library, result codes at the C boundary (src/api).
//
// conccl::Error carries a result code and a message; CONCCL_THROW / CONCCL_REQUIRE add the file:line of
// where it was raised, and Error::addContext lets outer layers prepend what they were doing, so one error
// reads like a short backtrace: "concclAllGather: rank 1: cudaMemcpyAsync(...) failed: invalid argument
// (src/exec/cuda/cuda_executor.cc:120)".
#pragma once

#include <conccl/conccl.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace conccl {

class Error : public std::exception {
 public:
  Error(concclResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  concclResult_t code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const noexcept { return message_; }

  // Prepends "context: " to the message.
  Error& addContext(const std::string& context) {
    message_ = context + ": " + message_;
    return *this;
  }

 private:
  concclResult_t code_;
  std::string message_;
};

namespace detail {
std::string formatLocation(const char* file, int line);
}  // namespace detail

}  // namespace conccl

// Throws conccl::Error(code, message + " (file:line)"). `message` is any expression convertible to
// std::string (use std::string concatenation or conccl::strCat).
#define CONCCL_THROW(code, message) \
  throw ::conccl::Error((code), std::string(message) + ::conccl::detail::formatLocation(__FILE__, __LINE__))

// Throws concclInvalidArgument with `message` unless `cond` holds.
#define CONCCL_REQUIRE(cond, message)                           \
  do {                                                          \
    if (!(cond)) CONCCL_THROW(concclInvalidArgument, message);  \
  } while (0)

// Throws concclInternalError: a broken invariant of conccl itself.
#define CONCCL_ASSERT(cond)                                                                      \
  do {                                                                                           \
    if (!(cond)) CONCCL_THROW(concclInternalError, std::string("internal check failed: ") + #cond); \
  } while (0)
