// Authenticator: token files, roles, constant-time comparison, no token in messages.
#include "server/auth.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace paratune::server {
namespace {

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path =
      ::testing::TempDir() + "paratune_auth_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(ConstantTimeEqualsTest, ComparesContentAndLength) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", ""));
  // A prefix padded with NULs must not match (the loop pads the shorter one with 0).
  EXPECT_FALSE(ConstantTimeEquals(std::string("ab\0", 3), "ab"));
}

TEST(AuthenticatorTest, NoTokensMeansOpen) {
  Authenticator auth;
  EXPECT_FALSE(auth.Enabled(Role::kClient));
  EXPECT_TRUE(auth.Check("", Role::kClient).ok());
  EXPECT_TRUE(auth.Check("Bearer anything", Role::kWorker).ok());
}

TEST(AuthenticatorTest, RolesAndErrors) {
  absl::StatusOr<Authenticator> auth = Authenticator::FromTokens("c-123", "w-456");
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE(auth->Check("Bearer c-123", Role::kClient).ok());
  EXPECT_TRUE(auth->Check("bearer  w-456 ", Role::kWorker).ok());
  EXPECT_EQ(auth->Check("", Role::kClient).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth->Check("Basic c-123", Role::kClient).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth->Check("Bearer c-12", Role::kClient).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth->Check("c-123", Role::kClient).code(), absl::StatusCode::kUnauthenticated);
  // The other role's valid token: authenticated but not allowed.
  absl::Status s = auth->Check("Bearer w-456", Role::kClient);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "the worker token cannot call the client API");
  EXPECT_EQ(auth->Check("Bearer c-123", Role::kWorker).code(),
            absl::StatusCode::kPermissionDenied);
  // No message ever repeats a token.
  for (const char* header : {"Bearer w-456", "Bearer c-12", "Bearer nope", ""}) {
    const std::string message(auth->Check(header, Role::kClient).message());
    EXPECT_EQ(message.find("456"), std::string::npos) << message;
    EXPECT_EQ(message.find("c-12"), std::string::npos) << message;
    EXPECT_EQ(message.find("nope"), std::string::npos) << message;
  }
}

TEST(AuthenticatorTest, OneRoleOpenOtherGuarded) {
  absl::StatusOr<Authenticator> auth = Authenticator::FromTokens("", "w-456");
  ASSERT_TRUE(auth.ok());
  EXPECT_TRUE(auth->Check("", Role::kClient).ok());
  EXPECT_EQ(auth->Check("", Role::kWorker).code(), absl::StatusCode::kUnauthenticated);
}

TEST(AuthenticatorTest, FromFilesTrimsTheTrailingNewline) {
  const std::string client = WriteFile("client", "  s3cret-client\n");
  const std::string worker = WriteFile("worker", "s3cret-worker\r\n");
  absl::StatusOr<Authenticator> auth = Authenticator::FromFiles(client, worker);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE(auth->Check("Bearer s3cret-client", Role::kClient).ok());
  EXPECT_TRUE(auth->Check("Bearer s3cret-worker", Role::kWorker).ok());
  std::filesystem::remove(client);
  std::filesystem::remove(worker);
}

TEST(AuthenticatorTest, BadTokenFilesAreErrors) {
  EXPECT_EQ(Authenticator::FromFiles("/nonexistent/token", "").status().code(),
            absl::StatusCode::kNotFound);
  const std::string empty = WriteFile("empty", "\n\n");
  EXPECT_EQ(Authenticator::FromFiles(empty, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string spaced = WriteFile("spaced", "two words\n");
  absl::Status s = Authenticator::FromFiles("", spaced).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()).find("two"), std::string::npos) << s.message();
  const std::string same = WriteFile("same", "shared");
  s = Authenticator::FromFiles(same, same).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("must differ"), std::string::npos);
  for (const std::string& p : {empty, spaced, same}) std::filesystem::remove(p);
}

}  // namespace
}  // namespace paratune::server
