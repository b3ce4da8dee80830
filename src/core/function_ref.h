// A non-owning reference to a callable: two pointers, no allocation, for a parameter that is
// only called before the function taking it returns (ThreadPool::ParallelFor's body). A
// std::function parameter copied every lambda with more than two captured references to the
// heap: about 180 allocations a decode step for the fork-joins of SmolLM2-135M
// (docs/performance-history.md, session 56). The callable must outlive the reference; a
// lambda written in the call's argument list does.
#ifndef KVPACK_CORE_FUNCTION_REF_H_
#define KVPACK_CORE_FUNCTION_REF_H_

#include <memory>
#include <type_traits>
#include <utility>

namespace kvpack {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                              std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): binds like a reference
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(
              std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace kvpack

#endif  // KVPACK_CORE_FUNCTION_REF_H_
