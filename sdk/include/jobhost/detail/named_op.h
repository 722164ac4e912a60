// jobhost/detail/named_op.h — the base of the SDK's operators (internal).
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <atomic>
#include <string>
#include <utility>

#include "jobhost/errors.h"
#include "jobhost/operator.h"

namespace jobhost::detail {

/// Remembers the operator's name so exceptions from user code can name it, and marks
/// the operator as active while its user code runs (for crash reports).
class NamedOp : public Operator {
 public:
  void open(OperatorContext& ctx) override {
    name_ = ctx.operatorName();
    slot_ = ctx.activeOperatorSlot();
  }

 protected:
  template <class F>
  decltype(auto) invoke(F&& f) {
    struct Mark {
      std::atomic<const char*>* slot;
      const char* previous;
      // Only the task's own thread writes its slot (and its crash handler, on the same
      // thread, reads it), so a load and a store do: an exchange would be a locked
      // instruction on every record of every operator.
      Mark(std::atomic<const char*>* s, const char* name)
          : slot(s), previous(s ? s->load(std::memory_order_relaxed) : nullptr) {
        if (s) s->store(name, std::memory_order_relaxed);
      }
      ~Mark() {
        if (slot) slot->store(previous, std::memory_order_relaxed);
      }
    } mark(slot_, name_.c_str());
    return callUser(name_, std::forward<F>(f));
  }
  std::string name_;
  std::atomic<const char*>* slot_ = nullptr;
};

}  // namespace jobhost::detail
