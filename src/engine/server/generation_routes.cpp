// The generation routes of the engine's HTTP server: SGLang's /generate (plain and streamed),
// OpenAI's /v1/completions and /v1/chat/completions (plain and streamed), /tokenize and
// /detokenize.
#include <algorithm>
#include <new>
#include <string>
#include <utility>

#include "core/log.h"
#include "engine/server/connection_watch.h"
#include "engine/server/server_impl.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine::server {
namespace {

// Ends a streamed response with an error event (SGLang's shape: data: {"error": {...}}).
bool end_stream_with_error(httplib::DataSink& sink, int status, const std::string& type,
                           const std::string& message) {
  try {
    std::string events = sse_event(error_body(message, type, status)) + "data: [DONE]\n\n";
    if (!sink.write(events.data(), events.size())) return false;
    sink.done();
    return true;
  } catch (...) {
    return false;  // ends the response where it is
  }
}

// One step of a streamed response runs after its route handler returned, outside guarded():
// an exception (std::bad_alloc, a failing tokenizer) ends this stream with an error event
// rather than escaping into cpp-httplib's writer. Its releaser then aborts what still runs.
template <typename Step>
bool guarded_step(httplib::DataSink& sink, Step&& step) {
  try {
    return step();
  } catch (const std::bad_alloc&) {
    LOG_ERROR("out of memory while streaming a response: it ends with an error event");
    return end_stream_with_error(sink, 503, "unavailable",
                                 "out of memory while streaming this response");
  } catch (const std::exception& e) {
    LOG_ERROR("streaming a response failed: ", e.what());
    return end_stream_with_error(sink, 500, "internal_error",
                                 std::string("internal error: ") + e.what());
  } catch (...) {
    return end_stream_with_error(sink, 500, "internal_error", "internal error");
  }
}

}  // namespace

// Server-sent events: one `data: {...}` per batch of new tokens (SGLang's cumulative shape:
// text and output_ids so far, finish_reason null), then the final object and `data: [DONE]`.
// The handler returns at once; cpp-httplib then calls the provider on the same thread until it
// is done, and the releaser runs when the response ends (aborting the request if unfinished).
void EngineServer::Impl::stream(const Request& req, Response& res, GenerateCall call) {
  register_rids(call.items);
  auto st = std::make_shared<Stream>();
  st->partial.prompt_tokens = static_cast<int64_t>(call.items[0].request.input_ids.size());
  auto on_tokens = [st](RequestId, const std::vector<int64_t>& ids,
                        const std::vector<float>& logprobs) {
    std::lock_guard<std::mutex> lock(st->mutex);
    st->partial.output_ids.insert(st->partial.output_ids.end(), ids.begin(), ids.end());
    st->partial.output_logprobs.insert(st->partial.output_logprobs.end(), logprobs.begin(),
                                       logprobs.end());
    st->changed.notify_all();
  };
  auto on_done = [st](RequestId, GenerateOutput output) {
    std::lock_guard<std::mutex> lock(st->mutex);
    st->final_output = std::move(output);
    st->changed.notify_all();
  };
  try {
    st->id = backend->submit(call.items[0].request, on_done, on_tokens);
  } catch (...) {
    unregister_rids(call.items);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(rids_mutex);
    active[call.items[0].rid] = st->id;
  }
  auto start = Clock::now();
  auto watch = std::make_shared<ConnectionWatch>(req.remote_addr, req.remote_port, req.local_port);
  auto shared_call = std::make_shared<GenerateCall>(std::move(call));
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, shared_call, watch, start](size_t, httplib::DataSink& sink) {
        return guarded_step(sink,
                            [&] { return stream_step(st, *shared_call, *watch, start, sink); });
      },
      [this, st, shared_call](bool) {
        bool finished;
        {
          std::lock_guard<std::mutex> lock(st->mutex);
          finished = st->final_output.has_value();
        }
        if (!finished) backend->abort(st->id);
        unregister_rids(shared_call->items);
      });
}

// One provider call: waits (bounded) for news and writes it. False ends the response early.
bool EngineServer::Impl::stream_step(const std::shared_ptr<Stream>& st, const GenerateCall& call,
                                     const ConnectionWatch& watch, Clock::time_point start,
                                     httplib::DataSink& sink) {
  std::unique_lock<std::mutex> lock(st->mutex);
  st->changed.wait_for(lock, std::chrono::milliseconds(100), [&] {
    return st->final_output.has_value() || st->partial.output_ids.size() > st->sent_tokens;
  });
  if (!st->final_output && (stopping || waited_paused_too_long(start) || watch.peer_closed())) {
    lock.unlock();
    backend->abort(st->id);
    return !watch.peer_closed();  // keep going to deliver the abort unless nobody listens
  }
  double latency = std::chrono::duration<double>(Clock::now() - start).count();
  const auto& tok = backend->tokenizer();
  if (st->final_output) {
    GenerateOutput output = *st->final_output;
    lock.unlock();
    std::string events = sse_event(generate_response(call, call.items[0], output, tok, latency)) +
                         "data: [DONE]\n\n";
    if (!sink.write(events.data(), events.size())) return false;
    sink.done();
    return true;
  }
  if (st->partial.output_ids.size() == st->sent_tokens) return true;  // nothing new yet
  GenerateOutput partial = st->partial;
  st->sent_tokens = partial.output_ids.size();
  lock.unlock();
  partial.weight_version = backend->weight_version();
  Json event = generate_response(call, call.items[0], partial, tok, latency);
  event["meta_info"]["finish_reason"] = nullptr;
  std::string text = sse_event(event);
  return sink.write(text.data(), text.size());
}

void EngineServer::Impl::fill_prompt_logprobs(GenerateCall& call) {
  if (call.logprob_start_len < 0) return;
  for (const auto& item : call.items) {
    if (item.sample_index != 0) continue;
    const auto& ids = item.request.input_ids;
    call.prompt_logprobs.push_back(backend->prompt_logprobs(
        ids, item.request.sampling.temperature,
        call.prompt_logprob_from(static_cast<int64_t>(ids.size())), call.top_logprobs_num));
  }
}

void EngineServer::Impl::fill_prompt_logprobs(OpenAiCall& call) {
  if (!call.echo || !call.logprobs) return;
  for (const auto& item : call.items) {
    if (item.sample_index != 0) continue;
    call.prompt_logprobs.push_back(backend->prompt_logprobs(
        item.request.input_ids, item.request.sampling.temperature, 1, call.top_logprobs));
  }
}

void EngineServer::Impl::install_generation_routes() {
  post("/generate", [this](const Request& req, Response& res) {
    auto start = Clock::now();
    GenerateCall call = parse_generate(parse_body(req.body, "/generate"), backend->tokenizer(),
                                       limits(), [this] { return make_rid(); });
    fill_prompt_logprobs(call);
    if (call.stream) return stream(req, res, std::move(call));
    auto outputs = run(req, call.items);
    double latency = std::chrono::duration<double>(Clock::now() - start).count();
    Json body = Json::array();
    for (size_t i = 0; i < outputs.size(); ++i) {
      body.push_back(
          generate_response(call, call.items[i], outputs[i], backend->tokenizer(), latency));
    }
    // SGLang answers a list for a batch or for n > 1 (prompt-major), else one object.
    send_json(res, call.batched || call.n > 1 ? body : body[0]);
  });
  // Ends a request by its rid (each of n samples has its own: rid-0, rid-1, ...) or all.
  post("/abort_request", [this](const Request& req, Response& res) {
    Json body = optional_body(req, "/abort_request");
    check_known_fields(body, {"rid", "abort_all"}, "/abort_request");
    if (json_get_or<bool>(body, "abort_all", false, "/abort_request")) {
      backend->abort_all();
      return send_json(res, ok("aborted all requests"));
    }
    auto rid = json_get<std::string>(body, "rid", "/abort_request");
    std::optional<RequestId> id;
    {
      std::lock_guard<std::mutex> lock(rids_mutex);
      auto it = active.find(rid);
      if (it != active.end() && it->second >= 0) id = it->second;
    }
    bool aborted = id && backend->abort(*id);
    send_json(res, Json{{"success", aborted},
                        {"message", aborted ? "aborted" : "no running request with this rid"}});
  });
  install_openai_routes();
  install_tokenizer_routes();
}

void EngineServer::Impl::install_openai_routes() {
  auto openai = [this](const Request& req, Response& res, OpenAiCall call) {
    const std::string rid = make_rid();
    for (size_t k = 0; k < call.items.size(); ++k)
      call.items[k].rid = call.items.size() == 1 ? rid : rid + "-" + std::to_string(k);
    OpenAiIds ids;
    ids.id = (call.chat ? "chatcmpl-" : "cmpl-") + rid;
    ids.model = options.served_model_name;
    ids.created = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    if (call.stream) {
      return openai_stream(req, res, std::make_shared<OpenAiCall>(std::move(call)), ids);
    }
    fill_prompt_logprobs(call);
    auto outputs = run(req, call.items);
    send_json(res, openai_response(call, outputs, backend->tokenizer(), ids));
  };
  post("/v1/completions", [this, openai](const Request& req, Response& res) {
    Json body = parse_body(req.body, "/v1/completions");
    openai(req, res, parse_completion(body, backend->tokenizer(), limits()));
  });
  post("/v1/chat/completions", [this, openai](const Request& req, Response& res) {
    OrderedJson body;
    try {
      body = parse_ordered_json(req.body, "/v1/chat/completions request body");
    } catch (const Error& e) {
      bad_request(e.what());
    }
    if (!body.is_object()) bad_request("/v1/chat/completions: the body must be a JSON object");
    openai(req, res,
           parse_chat_completion(body, backend->tokenizer(), backend->chat_formatter(), limits()));
  });
}

void EngineServer::Impl::openai_stream(const Request& req, Response& res,
                                       std::shared_ptr<OpenAiCall> call, OpenAiIds ids) {
  register_rids(call->items);
  auto st = std::make_shared<OpenAiStream>();
  st->choices.resize(call->items.size());
  std::vector<Engine::Submission> batch;
  for (size_t k = 0; k < call->items.size(); ++k) {
    st->choices[k].partial.prompt_tokens =
        static_cast<int64_t>(call->items[k].request.input_ids.size());
    auto on_tokens = [st, k](RequestId, const std::vector<int64_t>& new_ids,
                             const std::vector<float>& logprobs) {
      std::lock_guard<std::mutex> lock(st->mutex);
      auto& p = st->choices[k].partial;
      p.output_ids.insert(p.output_ids.end(), new_ids.begin(), new_ids.end());
      p.output_logprobs.insert(p.output_logprobs.end(), logprobs.begin(), logprobs.end());
      st->changed.notify_all();
    };
    auto on_done = [st, k](RequestId, GenerateOutput output) {
      std::lock_guard<std::mutex> lock(st->mutex);
      st->choices[k].final_output = std::move(output);
      st->changed.notify_all();
    };
    batch.push_back({call->items[k].request, std::move(on_done), std::move(on_tokens)});
  }
  std::vector<RequestId> submitted;
  try {
    // All at once (none queued if one is rejected): the n samples share the prompt's prefill.
    submitted = backend->submit_all(std::move(batch));
  } catch (...) {
    unregister_rids(call->items);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(st->mutex);
    std::lock_guard<std::mutex> rids_lock(rids_mutex);
    for (size_t k = 0; k < call->items.size(); ++k) {
      st->choices[k].id = submitted[k];
      active[call->items[k].rid] = submitted[k];
    }
  }
  auto start = Clock::now();
  auto watch = std::make_shared<ConnectionWatch>(req.remote_addr, req.remote_port, req.local_port);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, call, ids, watch, start](size_t, httplib::DataSink& sink) {
        return guarded_step(
            sink, [&] { return openai_stream_step(st, *call, ids, *watch, start, sink); });
      },
      [this, st, call](bool) {
        std::vector<RequestId> unfinished;
        {
          std::lock_guard<std::mutex> lock(st->mutex);
          for (const auto& c : st->choices) {
            if (!c.final_output) unfinished.push_back(c.id);
          }
        }
        for (auto id : unfinished) backend->abort(id);
        unregister_rids(call->items);
      });
}

namespace {

// The longest stop string of an item, in bytes: that much text is held back while it runs,
// as a stop string may still end (and trim) it.
size_t stop_holdback(const GenerateItem& item) {
  size_t longest = 0;
  for (const auto& s : item.request.sampling.stop) longest = std::max(longest, s.size());
  return longest;
}

// The length of the longest prefix of `text` that does not end inside a UTF-8 sequence.
size_t complete_utf8_prefix(const std::string& text) {
  const size_t size = text.size();
  for (size_t back = 1; back <= std::min<size_t>(4, size); ++back) {
    const auto c = static_cast<unsigned char>(text[size - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? size - back : size;
  }
  return size;
}

// The text of `choice` that may be sent now, and whether it extends what was sent.
std::string sendable_text(const GenerateItem& item, const ChoiceStream& choice,
                          const tokenizer::Tokenizer& tok) {
  if (choice.final_output) return output_text(item, *choice.final_output, tok);
  std::string text = output_text(item, choice.partial, tok);
  // A stop string may still end (and trim) the text: hold back that many bytes. Then a
  // character split across tokens (or by that cut) is an incomplete UTF-8 sequence until its
  // last byte arrives: hold it back too (the tokenizer may have decoded it to U+FFFD already).
  const size_t hold = stop_holdback(item);
  text.resize(text.size() > hold ? text.size() - hold : 0);
  text.resize(complete_utf8_prefix(text));
  static const std::string kReplacement = "\xEF\xBF\xBD";
  while (text.size() >= 3 && text.compare(text.size() - 3, 3, kReplacement) == 0)
    text.resize(text.size() - 3);
  return text;
}

}  // namespace

bool EngineServer::Impl::openai_stream_step(const std::shared_ptr<OpenAiStream>& st,
                                            const OpenAiCall& call, const OpenAiIds& ids,
                                            const ConnectionWatch& watch, Clock::time_point start,
                                            httplib::DataSink& sink) {
  std::unique_lock<std::mutex> lock(st->mutex);
  auto news = [&] {
    for (const auto& c : st->choices) {
      if (!c.started || (c.final_output && !c.finished) ||
          c.partial.output_ids.size() > c.sent_tokens)
        return true;
    }
    return false;
  };
  st->changed.wait_for(lock, std::chrono::milliseconds(100), news);
  bool all_final = true;
  for (const auto& c : st->choices) all_final = all_final && c.final_output.has_value();
  if (!all_final && (stopping || waited_paused_too_long(start) || watch.peer_closed())) {
    std::vector<RequestId> unfinished;
    for (const auto& c : st->choices) {
      if (!c.final_output) unfinished.push_back(c.id);
    }
    lock.unlock();
    for (auto id : unfinished) backend->abort(id);
    return !watch.peer_closed();
  }
  const auto& tok = backend->tokenizer();
  std::string events;
  bool all_sent = true;
  for (size_t k = 0; k < st->choices.size(); ++k) {
    auto& c = st->choices[k];
    const auto& item = call.items[k];
    if (c.finished) continue;
    std::string text = sendable_text(item, c, tok);
    const auto& source = c.final_output ? *c.final_output : c.partial;
    ChunkPart part;
    part.index = k;
    part.first = !c.started;
    if (text.size() > c.sent_text.size() && text.compare(0, c.sent_text.size(), c.sent_text) == 0) {
      part.text = text.substr(c.sent_text.size());
      c.sent_text = text;
    }
    if (part.first && call.echo) part.text = call.prompt_texts.at(item.prompt_index) + part.text;
    const size_t upto = source.output_ids.size();
    part.ids.assign(
        source.output_ids.begin() + static_cast<std::ptrdiff_t>(std::min(c.sent_tokens, upto)),
        source.output_ids.end());
    part.logprobs.assign(
        source.output_logprobs.begin() + static_cast<std::ptrdiff_t>(std::min(c.sent_tokens, upto)),
        source.output_logprobs.end());
    c.sent_tokens = upto;
    if (c.final_output) {
      part.finish_reason = finish_reason_name(c.final_output->finish_reason);
      c.finished = true;
    } else {
      all_sent = false;
    }
    c.started = true;
    if (part.first || !part.text.empty() || !part.ids.empty() || c.finished)
      events += sse_event(openai_chunk(call, part, tok, ids));
  }
  if (all_sent) {
    if (call.include_usage) {
      std::vector<GenerateOutput> outputs;
      for (const auto& c : st->choices) outputs.push_back(*c.final_output);
      events += sse_event(openai_usage_chunk(call, outputs, ids));
    }
    events += "data: [DONE]\n\n";
  }
  lock.unlock();
  if (!events.empty() && !sink.write(events.data(), events.size())) return false;
  if (all_sent) sink.done();
  return true;
}

// SGLang's /tokenize {prompt: str | [str], add_special_tokens} -> {tokens, count,
// max_model_len}, and /detokenize {tokens: [int] | [[int]], skip_special_tokens} -> {text}.
void EngineServer::Impl::install_tokenizer_routes() {
  post("/tokenize", [this](const Request& req, Response& res) {
    const std::string where = "/tokenize";
    Json body = parse_body(req.body, where);
    check_known_fields(body, {"model", "prompt", "add_special_tokens"}, where);
    if (!body.contains("prompt")) bad_request(where + ": required field 'prompt' is missing");
    bool special =
        as_bad_request([&] { return json_get_or<bool>(body, "add_special_tokens", true, where); });
    const auto& tok = backend->tokenizer();
    auto encode = [&](const Json& text, const std::string& field) {
      auto s = as_bad_request([&] { return json_as<std::string>(text, field, where); });
      return as_bad_request([&] { return tok.encode(s, special); });
    };
    Json reply = {{"max_model_len", backend->context_length()}};
    if (body["prompt"].is_array()) {
      Json tokens = Json::array(), counts = Json::array();
      for (size_t i = 0; i < body["prompt"].size(); ++i) {
        auto ids = encode(body["prompt"][i], "prompt[" + std::to_string(i) + "]");
        counts.push_back(ids.size());
        tokens.push_back(std::move(ids));
      }
      reply["tokens"] = std::move(tokens);
      reply["count"] = std::move(counts);
    } else {
      auto ids = encode(body["prompt"], "prompt");
      reply["count"] = ids.size();
      reply["tokens"] = std::move(ids);
    }
    send_json(res, reply);
  });
  post("/detokenize", [this](const Request& req, Response& res) {
    const std::string where = "/detokenize";
    Json body = parse_body(req.body, where);
    check_known_fields(body, {"model", "tokens", "skip_special_tokens"}, where);
    if (!body.contains("tokens")) bad_request(where + ": required field 'tokens' is missing");
    bool skip =
        as_bad_request([&] { return json_get_or<bool>(body, "skip_special_tokens", true, where); });
    const auto& tok = backend->tokenizer();
    const int64_t vocab = backend->vocab_size();
    auto decode = [&](const Json& ids_json, const std::string& field) {
      auto ids =
          as_bad_request([&] { return json_as<std::vector<int64_t>>(ids_json, field, where); });
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= vocab)
          bad_request(where + ": " + field + "[" + std::to_string(i) +
                      "] = " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                      std::to_string(vocab) + ")");
      }
      return tok.decode(ids, skip);
    };
    const Json& tokens = body["tokens"];
    if (tokens.is_array() && !tokens.empty() && tokens[0].is_array()) {
      Json texts = Json::array();
      for (size_t i = 0; i < tokens.size(); ++i)
        texts.push_back(decode(tokens[i], "tokens[" + std::to_string(i) + "]"));
      return send_json(res, Json{{"text", texts}});
    }
    send_json(res, Json{{"text", decode(tokens, "tokens")}});
  });
}

}  // namespace furlong::engine::server
