// Authenticator: bearer tokens from files, constant-time comparison.
#include "server/auth.h"

#include <cctype>
#include <fstream>
#include <initializer_list>
#include <sstream>

namespace paratune::server {
namespace {

// absl here is built with its own string_view, so these helpers take std::string_view.
std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

absl::Status ValidateToken(std::string_view token, std::string_view what) {
  if (token.empty()) return absl::InvalidArgumentError(Cat({what, " is empty"}));
  for (char c : token) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError(
          Cat({what, " must not contain whitespace or control characters"}));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, std::string_view role) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(Cat({"cannot read the ", role, " token file '", path, "'"}));
  }
  std::ostringstream content;
  content << in.rdbuf();
  const std::string raw = content.str();
  std::string token(Trim(raw));
  if (absl::Status s = ValidateToken(token, Cat({"the ", role, " token in '", path, "'"}));
      !s.ok()) {
    return s;
  }
  return token;
}

}  // namespace

std::string_view RoleName(Role role) { return role == Role::kClient ? "client" : "worker"; }

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Walk the longer string fully so the time does not reveal the matching prefix length.
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  // volatile keeps the compiler from turning the loop into an early-exit memcmp.
  volatile unsigned char result = diff;
  return result == 0;
}

absl::StatusOr<Authenticator> Authenticator::FromTokens(std::string client_token,
                                                        std::string worker_token) {
  Authenticator auth;
  if (!client_token.empty()) {
    if (absl::Status s = ValidateToken(client_token, "the client token"); !s.ok()) return s;
    auth.client_token_ = std::move(client_token);
  }
  if (!worker_token.empty()) {
    if (absl::Status s = ValidateToken(worker_token, "the worker token"); !s.ok()) return s;
    auth.worker_token_ = std::move(worker_token);
  }
  if (auth.client_token_ && auth.worker_token_ &&
      ConstantTimeEquals(*auth.client_token_, *auth.worker_token_)) {
    return absl::InvalidArgumentError(
        "the client and worker tokens must differ (otherwise a worker could act as a client)");
  }
  return auth;
}

absl::StatusOr<Authenticator> Authenticator::FromFiles(const std::string& client_token_file,
                                                       const std::string& worker_token_file) {
  std::string client, worker;
  if (!client_token_file.empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(client_token_file, "client");
    if (!t.ok()) return t.status();
    client = *std::move(t);
  }
  if (!worker_token_file.empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(worker_token_file, "worker");
    if (!t.ok()) return t.status();
    worker = *std::move(t);
  }
  return FromTokens(std::move(client), std::move(worker));
}

bool Authenticator::Enabled(Role role) const {
  return role == Role::kClient ? client_token_.has_value() : worker_token_.has_value();
}

absl::Status Authenticator::Check(std::string_view authorization_header, Role needed) const {
  if (!Enabled(needed)) return absl::OkStatus();
  const std::string_view role = RoleName(needed);
  std::string_view header = Trim(authorization_header);
  if (header.empty()) {
    return absl::UnauthenticatedError(Cat({
        "missing 'authorization: Bearer <token>' header (this API needs the ", role, " token)"}));
  }
  constexpr std::string_view kScheme = "bearer ";
  if (!StartsWithIgnoreCase(header, kScheme)) {
    return absl::UnauthenticatedError("the authorization header must use the Bearer scheme");
  }
  const std::string_view token = Trim(header.substr(kScheme.size()));
  // Compare against both tokens every time, so timing does not tell which one matched.
  const bool is_client = client_token_ && ConstantTimeEquals(token, *client_token_);
  const bool is_worker = worker_token_ && ConstantTimeEquals(token, *worker_token_);
  const bool matches_needed = needed == Role::kClient ? is_client : is_worker;
  if (matches_needed) return absl::OkStatus();
  if (is_client || is_worker) {
    return absl::PermissionDeniedError(Cat({
        "the ", needed == Role::kClient ? "worker" : "client", " token cannot call the ", role,
        " API"}));
  }
  return absl::UnauthenticatedError(Cat({"invalid ", role, " token"}));
}

}  // namespace paratune::server
