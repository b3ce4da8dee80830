// Always-on invariant checks. A failed check is a bug in kvpack, never a user error: user
// errors travel as Status (include/kvpack/status.h).
#ifndef KVPACK_CORE_CHECK_H_
#define KVPACK_CORE_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define KVPACK_CHECK(cond)                                                          \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: kvpack internal check failed: %s\n", __FILE__,   \
                   __LINE__, #cond);                                                \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#endif  // KVPACK_CORE_CHECK_H_
