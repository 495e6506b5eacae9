// Early-return helpers for absl::Status / absl::StatusOr inside kernels/.
#ifndef PARATUNE_KERNELS_STATUS_MACROS_H_
#define PARATUNE_KERNELS_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PT_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    if (absl::Status _st = (expr); !_st.ok()) {   \
      return _st;                                 \
    }                                             \
  } while (0)

#define PT_CONCAT_INNER(a, b) a##b
#define PT_CONCAT(a, b) PT_CONCAT_INNER(a, b)
#define PT_ASSIGN_OR_RETURN(lhs, expr) \
  PT_ASSIGN_OR_RETURN_IMPL(PT_CONCAT(_statusor_, __LINE__), lhs, expr)
#define PT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(*tmp)

#endif  // PARATUNE_KERNELS_STATUS_MACROS_H_
