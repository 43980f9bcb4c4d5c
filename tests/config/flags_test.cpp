// Flag table semantics: defaults < YAML < command line, --x/--no-x for every boolean, typed
// parsing, unknown flags and YAML keys rejected with a did-you-mean hint.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "config/flags.h"
#include "core/error.h"
#include "core/files.h"

namespace furlong::config {
namespace {

struct Options {
  double lr = 1e-6;
  double weight_decay = 0.0;
  int64_t global_batch_size = 64;
  bool keep_fp32_master = true;
  bool colocate = false;
  std::string mode = "sft";
  std::optional<int64_t> lr_decay_iters;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  std::string chat_kwargs = "{}";
};

FlagSet make_flags(Options& o) {
  FlagSet f("furlong test");
  f.add("lr", &o.lr, "peak learning rate");
  f.add("weight-decay", &o.weight_decay, "AdamW weight decay");
  f.add("global-batch-size", &o.global_batch_size, "samples per step");
  f.add("keep-fp32-master", &o.keep_fp32_master, "fp32 master weights");
  f.add("colocate", &o.colocate, "share devices");
  f.add("mode", &o.mode, "loss").choices = {"sft", "rl"};
  f.add("lr-decay-iters", &o.lr_decay_iters, "decay length");
  f.add("stop", &o.stop, "stop strings");
  f.add("stop-token-ids", &o.stop_token_ids, "stop ids");
  f.add("chat-kwargs", &o.chat_kwargs, "a JSON object");
  return f;
}

using testing::error_of;

TEST(Flags, DefaultsAreTheFieldValues) {
  Options o;
  auto f = make_flags(o);
  ASSERT_TRUE(f.parse({}));
  EXPECT_EQ(o.lr, 1e-6);
  EXPECT_TRUE(o.keep_fp32_master);
  EXPECT_EQ(f.origin("lr"), "default");
}

TEST(Flags, CommandLineBeatsYamlBeatsDefaults) {
  auto dir = testing::scratch_dir();
  write_file_atomic(dir / "c.yaml",
                    "lr: 3.0e-5\nweight_decay: 0.1\nkeep_fp32_master: false\ncolocate: true\n"
                    "stop: [\"</s>\", \"\\n\\n\"]\nlr-decay-iters: 100\n");
  Options o;
  auto f = make_flags(o);
  ASSERT_TRUE(f.parse({"--config", (dir / "c.yaml").string(), "--lr", "1e-4", "--no-colocate"}));
  EXPECT_EQ(o.lr, 1e-4);               // CLI over YAML
  EXPECT_EQ(o.weight_decay, 0.1);      // YAML over default
  EXPECT_FALSE(o.keep_fp32_master);    // YAML turns a true default off
  EXPECT_FALSE(o.colocate);            // CLI --no-x over YAML true
  EXPECT_EQ(o.global_batch_size, 64);  // default
  EXPECT_EQ(o.stop, (std::vector<std::string>{"</s>", "\n\n"}));
  EXPECT_EQ(o.lr_decay_iters, 100);
  EXPECT_EQ(f.origin("lr"), "cli");
  EXPECT_EQ(f.origin("weight-decay"), "yaml");
}

// miles' JSON-valued flags (--train-env-vars, --apply-chat-template-kwargs) written as YAML
// mappings: the string flag receives the mapping as JSON, scalars typed as YAML types them.
TEST(Flags, AYamlMappingGivesAStringFlagItsJson) {
  auto dir = testing::scratch_dir();
  write_file_atomic(dir / "c.yaml",
                    "chat_kwargs: {enable_thinking: false, n: 3, t: 0.5, name: 'x', q: \"true\", "
                    "list: [1, a], none: ~}\n");
  Options o;
  auto f = make_flags(o);
  ASSERT_TRUE(f.parse({"--config", (dir / "c.yaml").string()}));
  EXPECT_EQ(o.chat_kwargs,
            R"({"enable_thinking":false,"n":3,"t":0.5,"name":"x","q":"true","list":[1,"a"],)"
            R"("none":null})");
  write_file_atomic(dir / "bad.yaml", "lr: {a: 1}\n");
  auto msg = error_of([&] {
    Options p;
    make_flags(p).parse({"--config", (dir / "bad.yaml").string()});
  });
  EXPECT_NE(msg.find("key 'lr': expected a single value, got a mapping"), std::string::npos) << msg;
}

TEST(Flags, BooleansHaveBothForms) {
  Options o;
  auto f = make_flags(o);
  ASSERT_TRUE(f.parse({"--no-keep-fp32-master", "--colocate"}));
  EXPECT_FALSE(o.keep_fp32_master);
  EXPECT_TRUE(o.colocate);
  Options o2;
  auto f2 = make_flags(o2);
  ASSERT_TRUE(f2.parse({"--keep-fp32-master=false"}));
  EXPECT_FALSE(o2.keep_fp32_master);
}

// record_given: a default implied elsewhere yields to either polarity, from the CLI or YAML.
TEST(Flags, RecordGivenSeesBothPolaritiesAndYaml) {
  auto dir = testing::scratch_dir();
  write_file_atomic(dir / "c.yaml", "colocate: false\n");
  const std::vector<std::vector<std::string>> cases{
      {}, {"--colocate"}, {"--no-colocate"}, {"--config", (dir / "c.yaml").string()}};
  for (const auto& args : cases) {
    bool colocate = false;
    bool given = false;
    FlagSet f("furlong test");
    record_given(f.add("colocate", &colocate, "share devices"), &given);
    ASSERT_TRUE(f.parse(args));
    EXPECT_EQ(given, !args.empty()) << (args.empty() ? "(none)" : args[0]);
    EXPECT_EQ(colocate, !args.empty() && args[0] == "--colocate");
  }
}

TEST(Flags, ListsOptionalsAndInlineValues) {
  Options o;
  auto f = make_flags(o);
  ASSERT_TRUE(f.parse(
      {"--stop-token-ids", "1", "-2", "3", "--global-batch-size=8", "--lr-decay-iters", "none"}));
  EXPECT_EQ(o.stop_token_ids, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(o.global_batch_size, 8);
  EXPECT_FALSE(o.lr_decay_iters.has_value());
}

TEST(Flags, UnknownFlagsAndYamlKeysGetDidYouMean) {
  Options o;
  auto f = make_flags(o);
  auto msg = error_of([&] { f.parse({"--weight-decy", "0.1"}); });
  EXPECT_NE(msg.find("unknown flag --weight-decy (did you mean --weight-decay?)"),
            std::string::npos)
      << msg;
  auto dir = testing::scratch_dir();
  write_file_atomic(dir / "bad.yaml", "weight_decy: 0.1\nzzz_unrelated_key: 1\nlr: 2\n");
  Options o2;
  auto f2 = make_flags(o2);
  msg = error_of([&] { f2.parse({"--config", (dir / "bad.yaml").string()}); });
  EXPECT_NE(msg.find("unknown key(s) in the YAML config: 'weight_decy' (did you mean "
                     "'weight_decay'?), 'zzz_unrelated_key'"),
            std::string::npos)
      << msg;
  EXPECT_EQ(o2.lr, 1e-6) << "nothing is applied when the file has unknown keys";
}

TEST(Flags, OutOfRangeIntegersAndHugeNamesAreReportedAsGiven) {
  Options o;
  auto f = make_flags(o);
  // 2^64 and 2^63: the message shows the digits the user typed, not a narrowed value.
  for (const char* value :
       {"18446744073709551616", "9223372036854775808", "-9223372036854775809"}) {
    auto msg = error_of([&] { f.parse({"--global-batch-size", value}); });
    EXPECT_NE(msg.find(std::string("--global-batch-size: ") + value +
                       " is outside the 64-bit integer range"),
              std::string::npos)
        << msg;
  }
  ASSERT_TRUE(f.parse({"--global-batch-size", "1099511627776"}));
  EXPECT_EQ(o.global_batch_size, int64_t{1} << 40);
  // A 1 MB flag name: no did-you-mean search over it, and the message stays short.
  auto msg = error_of([&] { f.parse({"--" + std::string(1 << 20, 'w')}); });
  EXPECT_LT(msg.size(), 300u) << msg.substr(0, 300);
  EXPECT_NE(msg.find("unknown flag --www"), std::string::npos) << msg.substr(0, 300);
}

TEST(Flags, TypeChoiceAndMissingValueErrorsNameTheFlag) {
  Options o;
  auto f = make_flags(o);
  EXPECT_NE(error_of([&] {
              f.parse({"--lr", "fast"});
            }).find("--lr: expected a number, got 'fast'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              f.parse({"--global-batch-size", "1.5"});
            }).find("--global-batch-size: expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              f.parse({"--mode", "ppo"});
            }).find("invalid choice 'ppo'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.parse({"--lr"}); }).find("--lr: missing value"), std::string::npos);
  EXPECT_NE(error_of([&] { f.parse({"stray"}); }).find("unexpected argument 'stray'"),
            std::string::npos);
  auto dir = testing::scratch_dir();
  write_file_atomic(dir / "t.yaml", "global_batch_size: many\n");
  EXPECT_NE(error_of([&] {
              f.parse({"--config", (dir / "t.yaml").string()});
            }).find("key 'global-batch-size': expected an integer, got 'many'"),
            std::string::npos);
  write_file_atomic(dir / "broken.yaml", "lr: [1, 2\n");
  EXPECT_NE(error_of([&] {
              f.parse({"--config", (dir / "broken.yaml").string()});
            }).find("invalid YAML"),
            std::string::npos);
}

TEST(Flags, RequiredFlagsAreEnforcedAndHelpListsEveryFlag) {
  std::string input;
  FlagSet f("furlong x");
  f.add("input", &input, "the input").required = true;
  EXPECT_NE(error_of([&] { f.parse({}); }).find("missing required flag --input"),
            std::string::npos);
  Options o;
  auto g = make_flags(o);
  auto help = g.help_text();
  for (const auto& flag : g.flags()) EXPECT_NE(help.find(flag.name), std::string::npos);
  EXPECT_NE(help.find("--[no-]keep-fp32-master"), std::string::npos);
  EXPECT_NE(g.markdown_reference().find("`--[no-]colocate`"), std::string::npos);
}

}  // namespace
}  // namespace furlong::config
