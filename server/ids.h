// Random identifiers for jobs, workers and rendezvous namespaces.
#ifndef PARATUNE_SERVER_IDS_H_
#define PARATUNE_SERVER_IDS_H_

#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/str_format.h"

namespace paratune::server {

/// `prefix` followed by 48 random bits in hex ("job-0123456789ab"). Thread-safe.
inline std::string NewRandomId(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%s-%012x", prefix, rng() & 0xffffffffffffULL);
}

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_IDS_H_
