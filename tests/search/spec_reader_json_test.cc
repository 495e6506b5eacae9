#include "search/spec_reader_json.h"

#include <gtest/gtest.h>

#include <string>

namespace paratune {
namespace {

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<nlohmann::json> parsed = ParseJsonStrict(text);
  EXPECT_FALSE(parsed.ok()) << text;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(ParseJsonStrictTest, ReadsWhatNlohmannReads) {
  const std::string text = R"({"model": {"preset": "gpt3-175b"}, "search": {"tp": [1, 2]},
                               "x": null, "y": 1.5, "z": "s"})";
  absl::StatusOr<nlohmann::json> parsed = ParseJsonStrict(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, nlohmann::json::parse(text));
}

TEST(ParseJsonStrictTest, AKeyGivenTwiceIsNamedByItsPath) {
  EXPECT_EQ(ErrorOf(R"({"a": 1, "a": 2})"), "the key 'a' appears twice (each key may appear once)");
  EXPECT_EQ(ErrorOf(R"({"training": {"seq_length": 1, "dropout": false, "seq_length": 2}})"),
            "the key 'training.seq_length' appears twice (each key may appear once)");
  EXPECT_EQ(ErrorOf(R"({"search": [{"tp": 1, "tp": 2}]})"),
            "the key 'search[].tp' appears twice (each key may appear once)");
  // The same key in sibling objects is not a duplicate.
  EXPECT_TRUE(ParseJsonStrict(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 2}]})").ok());
}

TEST(ParseJsonStrictTest, NestingIsBounded) {
  const auto nested = [](int levels) {
    return std::string(levels, '[') + std::string(levels, ']');
  };
  EXPECT_TRUE(ParseJsonStrict(nested(kMaxJsonNesting)).ok());
  EXPECT_EQ(ErrorOf(nested(kMaxJsonNesting + 1)), "JSON nested deeper than 64 levels");
  // Deep and unterminated: still the nesting message, without building the document.
  EXPECT_EQ(ErrorOf(std::string(100000, '[')), "JSON nested deeper than 64 levels");
  // Inside a spec the message names the field the nesting is under.
  EXPECT_EQ(ErrorOf("{\"name\": " + nested(kMaxJsonNesting)), "name: JSON nested deeper than 64 levels");
  EXPECT_EQ(ErrorOf("{\"model\": {\"hidden_size\": " + nested(kMaxJsonNesting) + "}}"),
            "model.hidden_size: JSON nested deeper than 64 levels");
}

TEST(ParseJsonStrictTest, TextThatIsNotJsonSaysWhere) {
  const std::string message = ErrorOf("{\"a\": tru}");
  EXPECT_EQ(message.rfind("not valid JSON: ", 0), 0u) << message;
  EXPECT_NE(message.find("line 1, column"), std::string::npos) << message;
  EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
  EXPECT_EQ(ErrorOf("").rfind("not valid JSON: ", 0), 0u);
}

}  // namespace
}  // namespace paratune
