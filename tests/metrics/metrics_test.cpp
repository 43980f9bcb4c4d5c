// Metrics output: CRC32C, the TensorBoard event writer (read back by TensorBoard's own reader,
// scripts/oracles/read_tensorboard.py), MetricsLogger's JSONL and console table, and the HTML
// report.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "core/jsonl.h"
#include "metrics/html_report.h"
#include "metrics/metrics.h"
#include "metrics/tensorboard.h"

namespace furlong::metrics {
namespace {

using testing::error_of;

uint32_t crc_of(const std::string& s) {
  return crc32c(s.data(), s.size());
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Runs TensorBoard's reader on `dir`.
Json read_with_tensorboard(const std::filesystem::path& dir) {
  auto out = testing::scratch_dir() / "tb.json";
  testing::run_python("oracles/read_tensorboard.py", {dir.string(), out.string()});
  return read_json_file(out);
}

TEST(Crc32c, KnownVectors) {
  // The check value of CRC-32C and the RFC 3720 (iSCSI) B.4 vectors.
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(""), 0u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  for (int i = 31; i >= 0; --i) descending += static_cast<char>(i);
  EXPECT_EQ(crc_of(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc_of(descending), 0x113FDB5Cu);
  // Extending a CRC equals the CRC of the concatenation.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
  // Masking: rotate right by 15, add 0xa282ead8.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, ScalarEventBytes) {
  // Event{wall_time=1.5, step=300, summary{value{tag="a/b", simple_value=2}}}, by hand.
  auto got = tensorboard::encode_scalars_event(1.5, 300, {{"a/b", 2.0f}});
  std::string want = "\x09";
  const double wall = 1.5;
  want.append(reinterpret_cast<const char*>(&wall), 8);
  want += "\x10\xac\x02";  // step 300 as a varint
  want += std::string("\x2a\x0c", 2) + "\x0a\x0a" + "\x0a\x03" + "a/b" + "\x15";
  const float value = 2.0f;
  want.append(reinterpret_cast<const char*>(&value), 4);
  EXPECT_EQ(got, want);
  auto framed = tensorboard::frame_record(got);
  ASSERT_EQ(framed.size(), 8 + 4 + got.size() + 4);
  uint64_t length = 0;
  std::memcpy(&length, framed.data(), 8);
  EXPECT_EQ(length, got.size());
  uint32_t data_crc = 0;
  std::memcpy(&data_crc, framed.data() + 12 + got.size(), 4);
  EXPECT_EQ(data_crc, masked_crc32c(got.data(), got.size()));
}

TEST(TensorBoard, ReadBackByTensorBoard) {
  auto dir = testing::scratch_dir() / "tb";
  const double start = now_seconds();
  std::filesystem::path file;
  {
    TensorBoardWriter writer(dir);
    file = writer.path();
    for (int step = 0; step < 5; ++step) {
      writer.add_scalars(step, {{"rollout/raw_reward", 0.1 * step}, {"train/pg_loss", -3.5e-7}});
    }
    writer.add_scalar("train/pg_loss", 1e20, 1000000);
    writer.add_scalar("perf/odd tag (µs)", 2.5, 7);
  }
  EXPECT_NE(file.filename().string().find("events.out.tfevents."), std::string::npos);
  auto tb = read_with_tensorboard(dir);
  EXPECT_EQ(tb["files"].size(), 1u);
  EXPECT_TRUE(tb["crc_ok"].get<bool>());
  EXPECT_EQ(tb["records"], 1 + 5 + 2);  // file_version + one record per add call
  EXPECT_EQ(tb["file_version"], "brain.Event:2");
  EXPECT_EQ(tb["masked_crc32c_123456789"].get<uint32_t>(), masked_crc32c("123456789", 9));
  const auto& s = tb["scalars"];
  ASSERT_EQ(s.size(), 3u) << s.dump();
  ASSERT_EQ(s["rollout/raw_reward"].size(), 5u);
  for (int step = 0; step < 5; ++step) {
    const auto& e = s["rollout/raw_reward"][step];
    EXPECT_EQ(e[0].get<int64_t>(), step);
    // simple_value is float32: exactly the float of the logged double.
    EXPECT_EQ(e[1].get<float>(), static_cast<float>(0.1 * step));
    EXPECT_GE(e[2].get<double>(), start - 1.0);
    EXPECT_LE(e[2].get<double>(), now_seconds() + 1.0);
  }
  ASSERT_EQ(s["train/pg_loss"].size(), 6u);
  EXPECT_EQ(s["train/pg_loss"][0][1].get<float>(), -3.5e-7f);
  EXPECT_EQ(s["train/pg_loss"][5][0].get<int64_t>(), 1000000);
  EXPECT_EQ(s["train/pg_loss"][5][1].get<float>(), 1e20f);
  EXPECT_EQ(s["perf/odd tag (µs)"][0][1].get<float>(), 2.5f);
}

TEST(TensorBoard, SecondWriterInSameDirectoryGetsItsOwnFile) {
  auto dir = testing::scratch_dir();
  TensorBoardWriter a(dir), b(dir);
  EXPECT_NE(a.path(), b.path());
}

TEST(Metrics, ConsoleTableGroupsByPrefix) {
  auto table = format_metrics_table(3, {{"rollout/raw_reward", 0.5},
                                        {"train/pg_loss", -0.0123},
                                        {"rollout/response_len/mean", 123},
                                        {"lr", 1e-6}});
  EXPECT_EQ(table,
            "step 3\n"
            "  rollout  raw_reward=0.5  response_len/mean=123\n"
            "  train    pg_loss=-0.0123\n"
            "  -        lr=1e-06\n");
}

TEST(Metrics, JsonlRowsTensorBoardAndErrors) {
  auto dir = testing::scratch_dir();
  MetricsOptions o{.jsonl_path = dir / "logs" / "metrics.jsonl",
                   .tensorboard_dir = dir / "tb",
                   .console_table = false};
  {
    MetricsLogger logger(o);
    logger.log(0, {{"rollout/raw_reward", 0.25}, {"train/loss", 1.0 / 3.0}});
    logger.log(1, {{"train/loss", std::numeric_limits<double>::quiet_NaN()}});
    auto msg = error_of([&] { logger.log(2, {{"a", 1.0}, {"a", 2.0}}); });
    EXPECT_NE(msg.find("'a' is logged twice"), std::string::npos) << msg;
  }
  {
    MetricsLogger again(o);  // appends to the existing file
    again.log(2, {{"train/loss", 0.5}});
  }
  auto rows = read_jsonl(o.jsonl_path);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].value.dump(), "{\"step\":0,\"rollout/raw_reward\":0.25,\"train/loss\":" +
                                      Json(1.0 / 3.0).dump() + "}");
  EXPECT_EQ(rows[0].value["train/loss"].get<double>(), 1.0 / 3.0);  // round-trips exactly
  EXPECT_TRUE(rows[1].value["train/loss"].is_null());
  EXPECT_EQ(rows[2].value["step"], 2);
  auto tb = read_with_tensorboard(o.tensorboard_dir);
  EXPECT_EQ(tb["files"].size(), 2u);  // one event file per logger
  EXPECT_EQ(tb["scalars"]["rollout/raw_reward"][0][1].get<float>(), 0.25f);
  EXPECT_EQ(tb["scalars"]["train/loss"].size(), 3u);
  EXPECT_TRUE(tb["scalars"]["train/loss"][1][1].is_null());  // NaN stays NaN in TensorBoard
}

std::string write_rows(const std::filesystem::path& path, int steps) {
  std::ofstream out(path);
  for (int s = 0; s < steps; ++s) {
    Json row = {{"step", s},
                {"rollout/raw_reward", 0.1 * s},
                {"rollout/response_len/mean", 100 + 3 * s},
                {"train/ppo_kl", 1e-3 * s},
                {"train/kl_loss", 2e-3 * s},
                {"train/entropy_loss", 1.2 - 0.01 * s},
                {"perf/train_time", 3.5},
                {"perf/rollout_time", 7.0 + s},
                {"train/grad_norm", s % 2 ? Json(nullptr) : Json(0.5)},
                {"<script>alert('x')</script>", 1.0},
                {"note", "text is skipped"}};
    out << row.dump() << "\n";
  }
  return path.string();
}

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (auto p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1)) {
    ++n;
  }
  return n;
}

TEST(HtmlReport, OneSvgPerFamilyEscapedAndSelfContained) {
  auto dir = testing::scratch_dir();
  write_rows(dir / "metrics.jsonl", 12);
  write_html_report(dir / "metrics.jsonl", dir / "report.html", "run <7> & co");
  auto html = read_file(dir / "report.html");
  // Reward, Response length, KL (ppo_kl + kl_loss), Entropy, Timings (2 series), then one each
  // for grad_norm and the odd name: 7 charts.
  EXPECT_EQ(count(html, "<svg"), 7u);
  EXPECT_EQ(count(html, "</svg>"), 7u);
  for (const char* title : {"<h2>Reward</h2>", "<h2>Response length</h2>", "<h2>KL</h2>",
                            "<h2>Entropy</h2>", "<h2>Timings</h2>", "<h2>train/grad_norm</h2>"}) {
    EXPECT_NE(html.find(title), std::string::npos) << title;
  }
  EXPECT_EQ(html.find("<script"), std::string::npos);  // the metric name is escaped
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("<title>run &lt;7&gt; &amp; co</title>"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);  // nothing external
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(count(html, "<polyline"), 9u);  // one per numeric series
  // Axis ticks: the KL chart's y axis spans 0 .. 0.022 in steps of 0.005.
  EXPECT_NE(html.find(">0.005</text>"), std::string::npos);
  // Atomic write: nothing but the two files in the directory.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 2u);
}

TEST(HtmlReport, EmptyAndConstantSeries) {
  auto dir = testing::scratch_dir();
  std::ofstream(dir / "empty.jsonl") << "\n";
  write_html_report(dir / "empty.jsonl", dir / "empty.html", "empty");
  auto html = read_file(dir / "empty.html");
  EXPECT_EQ(count(html, "<svg"), 0u);
  EXPECT_NE(html.find("No numeric metrics"), std::string::npos);
  std::ofstream(dir / "one.jsonl") << "{\"step\": 4, \"x\": 2.0}\n";
  write_html_report(dir / "one.jsonl", dir / "one.html", "one");
  html = read_file(dir / "one.html");
  EXPECT_EQ(count(html, "<svg"), 1u);
  EXPECT_EQ(html.find("nan"), std::string::npos);  // a single point still has finite axes
  EXPECT_EQ(html.find("inf"), std::string::npos);
  auto msg = error_of([&] { write_html_report(dir / "missing.jsonl", dir / "x.html", "x"); });
  EXPECT_NE(msg.find("missing.jsonl"), std::string::npos) << msg;
}

}  // namespace
}  // namespace furlong::metrics
