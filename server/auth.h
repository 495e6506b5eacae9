// Bearer-token authentication shared by the gRPC services and the REST gateway.
//
// Two tokens, each read from a file: one for clients (Autotuner API, REST /v1/...) and one
// for workers (WorkerHub API). A role whose token is not configured is open. Tokens are
// compared in constant time and never logged.
//
// Thread-safe after construction (immutable).
#ifndef PARATUNE_SERVER_AUTH_H_
#define PARATUNE_SERVER_AUTH_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paratune::server {

/// Who a call needs to come from.
enum class Role { kClient, kWorker };

/// "client" or "worker".
std::string_view RoleName(Role role);

class Authenticator {
 public:
  /// No tokens: every call is allowed.
  Authenticator() = default;

  /// Reads the tokens from files (an empty path leaves that role open). The file holds the
  /// token; surrounding whitespace (a trailing newline) is ignored. Errors: NotFound when a
  /// file cannot be read, InvalidArgument when a token is empty, contains whitespace or
  /// control characters, or both roles share one token.
  static absl::StatusOr<Authenticator> FromFiles(const std::string& client_token_file,
                                                 const std::string& worker_token_file);
  /// Same rules as FromFiles, with the tokens given directly (empty = open).
  static absl::StatusOr<Authenticator> FromTokens(std::string client_token,
                                                  std::string worker_token);

  /// Whether calls needing `role` must carry a token.
  bool Enabled(Role role) const;

  /// Checks an HTTP/gRPC `authorization` header value ("Bearer <token>") for a call that
  /// needs `needed`. OK when the role is open or the token matches; PermissionDenied when
  /// the token is valid but belongs to the other role; Unauthenticated otherwise (missing
  /// header, wrong scheme, unknown token). Messages never contain the token.
  absl::Status Check(std::string_view authorization_header, Role needed) const;

 private:
  std::optional<std::string> client_token_;
  std::optional<std::string> worker_token_;
};

/// Compares two strings in time that depends only on their lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_AUTH_H_
