// The scheduler thread: admission (KV reservations), prefix sharing between requests with the
// same prompt, chunked prefill of long prompts, and one step at a time of prefill + decode.
//
// Prefix sharing (EngineOptions::prefix_sharing). Among requests admitted with identical
// prompt ids under the same weight version, the first is the group's leader and is prefilled
// as usual. The others (followers) hold references to the leader's full prompt blocks
// (KvCache::share; reserved once) plus blocks of their own for the partial last prompt block
// and their output. In the leader's final prefill step each follower rides in the same
// forward pass with no new tokens: paged_forward then returns the leader's last hidden row for
// it, so its first token is drawn from the leader's logits (same values, its own generator).
// Afterwards the partial block's K/V slots are copied (bit-exact) into the follower's own
// block and the group dissolves: every member decodes in its own blocks, and a shared block
// is freed when its last owner ends. Each follower thus computes what an unshared run computes
// from bit-identical K/V and logits of its prompt; across runs the values still differ by
// rounding, as the engine's GEMMs round a row differently with the number of rows in a pass
// (tests/engine/engine_sharing_test.cpp).
//
// Groups live only between admission and the leader's final prefill step and are touched only
// by the scheduler thread (admit and take_aborts run under mu, step outside it).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "engine/kv_cache.h"
#include "engine/paged_forward.h"

namespace furlong::engine {

void Engine::Impl::scheduler_loop() {
  c10::InferenceMode guard;
  auto on_device = device_guard();
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    cv.wait(lock, [&] {
      return stopping || !abort_requested.empty() || can_step() || has_exact_pending;
    });
    auto finished = take_aborts();
    bool run = can_step();
    const bool flush = !run && has_exact_pending;  // never sleep on unscored requests
    if (stopping && finished.empty() && !run && !flush) break;
    if (run || flush) in_step = true;
    lock.unlock();
    if (flush) {
      auto done = flush_exact_pending();
      finished.insert(finished.end(), done.begin(), done.end());
    } else if (run) {
      try {
        auto done = step();
        finished.insert(finished.end(), done.begin(), done.end());
      } catch (const std::exception& e) {
        // Failures of one sequence are handled inside step(); this is a failure of the step
        // itself (e.g. the weights are gone), which no running request can survive.
        LOG_ERROR("engine step failed: ", e.what(), "; aborting the running requests");
        std::lock_guard<std::mutex> g(mu);
        for (const auto& s : running) {
          s->error = e.what();
          abort_requested.insert(s->id);
        }
      }
    }
    for (const auto& s : finished) {
      if (!s->error.empty()) {
        s->out.error = s->error;
        std::lock_guard<std::mutex> g(mu);
        step_errors[s->id] = s->error;
      }
      if (s->on_done) s->on_done(s->id, std::move(s->out));
      if (!s->error.empty()) {
        std::lock_guard<std::mutex> g(mu);
        step_errors.erase(s->id);
      }
    }
    lock.lock();
    in_step = false;
    idle_cv.notify_all();
  }
}

std::vector<std::shared_ptr<Sequence>> Engine::Impl::take_aborts() {
  std::vector<std::shared_ptr<Sequence>> finished;
  if (abort_requested.empty()) return finished;
  auto aborted = [&](const std::shared_ptr<Sequence>& s) {
    if (!abort_requested.count(s->id)) return false;
    s->out.finish_reason = FinishReason::kAbort;
    collect_routing(*s);
    if (!s->blocks.empty()) cache->free(s->blocks);
    s->blocks.clear();
    live.erase(s->id);
    finished.push_back(s);
    return true;
  };
  waiting.erase(std::remove_if(waiting.begin(), waiting.end(), aborted), waiting.end());
  running.erase(std::remove_if(running.begin(), running.end(), aborted), running.end());
  repair_prefix_groups();
  abort_requested.clear();
  return finished;
}

// Drops aborted followers from their groups; a group whose leader was aborted before its
// prompt was prefilled gets its first remaining follower as leader. That follower's block
// table already holds the shared blocks (its references keep them) and a block of its own for
// the partial last prompt block, so it prefills the prompt as any leader does. Called with mu
// held, before abort_requested is cleared.
void Engine::Impl::repair_prefix_groups() {
  for (auto& [leader_id, group] : prefix_groups) {
    auto& f = group.followers;
    f.erase(std::remove_if(f.begin(), f.end(),
                           [&](const std::shared_ptr<Sequence>& s) {
                             if (!abort_requested.count(s->id)) return false;
                             leader_of.erase(s->id);
                             return true;
                           }),
            f.end());
  }
  std::vector<RequestId> orphaned;
  for (const auto& [leader_id, group] : prefix_groups) {
    if (abort_requested.count(leader_id)) orphaned.push_back(leader_id);
  }
  for (RequestId id : orphaned) {
    PrefixGroup group = std::move(prefix_groups.at(id));
    prefix_groups.erase(id);
    if (group.followers.empty()) continue;
    auto leader = group.followers.front();
    leader_of.erase(leader->id);
    leader->num_cached = 0;  // nothing of the prompt is trusted: it is prefilled again
    PrefixGroup promoted{leader, {}, group.weight_version};
    for (size_t i = 1; i < group.followers.size(); ++i) {
      leader_of[group.followers[i]->id] = leader->id;
      promoted.followers.push_back(group.followers[i]);
    }
    prefix_groups.emplace(leader->id, std::move(promoted));
  }
}

// The pending leader `s` can follow: same prompt ids, same weights, nothing prefilled yet.
Engine::Impl::PrefixGroup* Engine::Impl::group_to_join(const Sequence& s) {
  for (auto& [id, group] : prefix_groups) {
    const auto& leader = *group.leader;
    if (leader.num_cached == 0 && group.weight_version == weight_version &&
        leader.prompt_len == s.prompt_len && leader.tokens == s.tokens) {
      return &group;
    }
  }
  return nullptr;
}

// Reserves prompt + max_new_tokens slots for `s`, sharing a pending leader's full prompt
// blocks when it can. False (nothing taken) when the cache has too few free blocks.
bool Engine::Impl::reserve(const std::shared_ptr<Sequence>& s) {
  const int64_t tokens = std::max<int64_t>(s->prompt_len + s->sampling.max_new_tokens, 1);
  const bool shares = options.prefix_sharing && s->sampling.max_new_tokens > 0;
  PrefixGroup* group = shares ? group_to_join(*s) : nullptr;
  if (group) {
    const auto& leader = *group->leader;
    const int64_t shared = s->prompt_len / cache->block_size();
    auto own = cache->allocate_blocks(cache->blocks_for(tokens) - shared);
    if (!own) return false;
    std::vector<int64_t> table(leader.blocks.begin(), leader.blocks.begin() + shared);
    cache->share(table);
    table.insert(table.end(), own->begin(), own->end());
    s->blocks = std::move(table);
    group->followers.push_back(s);
    leader_of[s->id] = leader.id;
    prefix_shared_tokens += s->prompt_len;
  } else {
    auto blocks = cache->allocate_tokens(tokens);
    if (!blocks) return false;
    s->blocks = std::move(*blocks);
    if (shares) prefix_groups.emplace(s->id, PrefixGroup{s, {}, weight_version});
  }
  s->slots = cache->slots_for(s->blocks, tokens);
  return true;
}

// Moves waiting requests into running, first come first served, while the batch has room and
// the cache can reserve each one's prompt + max_new_tokens slots (no preemption needed).
// Called with mu held.
void Engine::Impl::admit() {
  while (!waiting.empty() && static_cast<int64_t>(running.size()) < options.max_running_requests) {
    if (!reserve(waiting.front())) break;
    running.push_back(std::move(waiting.front()));
    waiting.pop_front();
  }
}

void Engine::Impl::check_weights_present() const {
  FURLONG_CHECK(!weights_released,
                "engine: weights were released (release_memory with weights) and not all "
                "refilled by a weight update; cannot generate");
}

// Admits waiting requests, then plans this step: every decode, and prompt work while the
// prefill budget lasts (at least one prompt per step). A prompt longer than
// chunked_prefill_size is split at fixed multiples of it (so its arithmetic does not depend on
// what else is running); its chunks before the last run in `chunks`, its last chunk samples the
// first token with the decodes in `batch`. Followers ride in `batch` right after their leader.
Engine::Impl::StepPlan Engine::Impl::plan_step() {
  std::lock_guard<std::mutex> lock(mu);
  admit();
  StepPlan plan;
  int64_t prefill_budget = options.max_prefill_tokens;
  const int64_t chunk = options.chunked_prefill_size;
  for (const auto& s : running) {
    if (leader_of.count(s->id)) continue;
    const int64_t remaining = static_cast<int64_t>(s->tokens.size()) - s->num_cached;
    if (s->num_cached < s->prompt_len) {
      const int64_t take = chunk > 0 ? std::min(remaining, chunk) : remaining;
      if (take > prefill_budget && prefill_budget < options.max_prefill_tokens) continue;
      prefill_budget -= take;
      if (take < remaining) {
        plan.chunks.emplace_back(s, take);
        continue;
      }
    }
    plan.batch.push_back(s);
    auto group = prefix_groups.find(s->id);
    if (group == prefix_groups.end()) continue;
    plan.batch.insert(plan.batch.end(), group->second.followers.begin(),
                      group->second.followers.end());
  }
  return plan;
}

void Engine::Impl::fail_sequence(Sequence& s, const std::string& why) {
  LOG_ERROR("engine: request ", s.id, " failed and is ended alone: ", why);
  std::lock_guard<std::mutex> lock(mu);
  s.error = why;
  abort_requested.insert(s.id);
  cv.notify_all();
}

// A sequence and the followers waiting on its prompt end together (they share its prefill).
void Engine::Impl::fail_with_followers(Sequence& s, const std::string& why) {
  auto group = prefix_groups.find(s.id);
  if (group != prefix_groups.end()) {
    for (const auto& f : group->second.followers) fail_sequence(*f, why);
  }
  fail_sequence(s, why);
}

// Intermediate prefill chunks: K/V only (the hidden states are not used). On failure each
// sequence is retried alone, and one that fails alone ends with its followers.
void Engine::Impl::prefill_chunks(
    const std::vector<std::pair<std::shared_ptr<Sequence>, int64_t>>& chunks) {
  std::vector<StepSequence> steps;
  for (const auto& [s, take] : chunks) {
    steps.push_back(
        {s->tokens.data() + s->num_cached, take, s->num_cached, s->slots, &s->linear_state});
  }
  try {
    StagedLinearStates staged;
    paged_forward(*model, *cache, steps, forward, &packed_weights, &staged);
    if (staged.commit) staged.commit();
  } catch (const std::exception& e) {
    if (chunks.size() == 1) return fail_with_followers(*chunks[0].first, e.what());
    for (const auto& c : chunks) prefill_chunks({c});
    return;
  }
  for (const auto& [s, take] : chunks) s->num_cached += take;
}

std::vector<std::shared_ptr<Sequence>> Engine::Impl::step() {
  check_weights_present();
  auto plan = plan_step();
  if (!plan.chunks.empty()) prefill_chunks(plan.chunks);
  std::vector<std::shared_ptr<Sequence>> finished;
  std::vector<std::shared_ptr<Sequence>> to_run;
  RequestId last_leader = -1;
  for (const auto& s : plan.batch) {
    if (s->sampling.max_new_tokens == 0) {
      finish(s, FinishReason::kLength);
      finished.push_back(s);
    } else if (s->slots.numel() < static_cast<int64_t>(s->tokens.size())) {
      // Never write K/V outside the request's own reservation.
      fail_with_followers(*s, "its KV-cache reservation (" + std::to_string(s->slots.numel()) +
                                  " slots) does not cover its " + std::to_string(s->tokens.size()) +
                                  " tokens");
    } else if (!leader_of.count(s->id)) {
      to_run.push_back(s);
      last_leader = s->id;
    } else if (leader_of.at(s->id) == last_leader) {
      to_run.push_back(s);  // a follower only right behind its leader (which may have failed)
    }
  }
  if (!to_run.empty()) advance_isolating_failures(to_run);
  log_decode_stats(static_cast<int64_t>(to_run.size()));
  std::vector<std::shared_ptr<Sequence>> completed;
  for (const auto& s : to_run) {
    if (s->finished) completed.push_back(s);
  }
  const bool defer = options.exact_logprobs && !cache->records_routing();
  if (options.exact_logprobs && !defer && !completed.empty()) {
    recompute_isolating_failures(completed);
  }
  for (const auto& s : completed) {
    if (defer) {
      exact_pending.push_back(s);
      exact_pending_tokens += static_cast<int64_t>(s->tokens.size());
    } else {
      finished.push_back(s);
    }
  }
  bool drained = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto release = [&](const std::shared_ptr<Sequence>& s) {
      collect_routing(*s);
      if (!s->blocks.empty()) cache->free(s->blocks);
      s->blocks.clear();
      live.erase(s->id);
      abort_requested.erase(s->id);
    };
    for (const auto& s : finished) release(s);  // holds `completed` unless deferred
    if (defer) {
      for (const auto& s : completed) release(s);
    }
    running.erase(
        std::remove_if(running.begin(), running.end(),
                       [](const std::shared_ptr<Sequence>& s) { return s->blocks.empty(); }),
        running.end());
    drained = (running.empty() && waiting.empty()) || paused || control_holds > 0 || stopping;
    has_exact_pending = !exact_pending.empty();
  }
  if (!exact_pending.empty() && (drained || ++exact_pending_steps >= kExactMaxWaitSteps ||
                                 exact_pending_tokens >= kExactBatchTokens)) {
    auto scored = flush_exact_pending();
    finished.insert(finished.end(), scored.begin(), scored.end());
  }
  return finished;
}

std::vector<std::shared_ptr<Sequence>> Engine::Impl::flush_exact_pending() {
  auto scored = std::move(exact_pending);
  exact_pending.clear();
  exact_pending_tokens = exact_pending_steps = 0;
  if (!scored.empty()) recompute_isolating_failures(scored);
  std::lock_guard<std::mutex> lock(mu);
  has_exact_pending = false;
  return scored;
}

// SGLang's "Decode batch" line: one info line every decode_log_interval steps that sampled
// tokens, with the running and queued requests, the KV-cache use and the tokens/s since the
// previous line (scheduler thread only).
void Engine::Impl::log_decode_stats(int64_t tokens_this_step) {
  if (options.decode_log_interval <= 0 || tokens_this_step == 0) return;
  decode_log.tokens += tokens_this_step;
  if (++decode_log.steps < options.decode_log_interval) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - decode_log.since).count();
  size_t queued = 0;
  size_t num_running = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    queued = waiting.size();
    num_running = running.size();
  }
  const int64_t used_blocks = cache->num_blocks() - cache->num_free_blocks();
  char line[200];
  std::snprintf(
      line, sizeof line,
      "engine: decode: %zu running, %zu queued, KV cache %.1f%% used (%lld of %lld "
      "tokens), %.1f tokens/s over the last %lld steps",
      num_running, queued, 100.0 * used_blocks / std::max<int64_t>(1, cache->num_blocks()),
      static_cast<long long>(used_blocks * cache->block_size()),
      static_cast<long long>(cache->capacity_tokens()), decode_log.tokens / std::max(seconds, 1e-9),
      static_cast<long long>(decode_log.steps));
  LOG_INFO(line);
  decode_log = DecodeLog{0, 0, now};
}

// Units of a batch that must run together: a sequence and the pending followers behind it.
std::vector<std::vector<std::shared_ptr<Sequence>>> Engine::Impl::sharing_units(
    const std::vector<std::shared_ptr<Sequence>>& seqs) const {
  std::vector<std::vector<std::shared_ptr<Sequence>>> units;
  for (const auto& s : seqs) {
    if (units.empty() || !leader_of.count(s->id)) units.emplace_back();
    units.back().push_back(s);
  }
  return units;
}

void Engine::Impl::advance_isolating_failures(const std::vector<std::shared_ptr<Sequence>>& seqs) {
  std::vector<int64_t> chosen;
  std::vector<float> logprobs;
  try {
    std::tie(chosen, logprobs) = forward_with_followers(seqs);
  } catch (const std::exception& e) {
    auto units = sharing_units(seqs);
    if (units.size() == 1) return fail_with_followers(*seqs[0], e.what());
    LOG_WARN("engine: a step over ", seqs.size(), " requests failed (", e.what(),
             "); running each alone to find the failing ones");
    for (const auto& unit : units) advance_isolating_failures(unit);
    return;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto& s = *seqs[i];
    try {
      s.num_cached = static_cast<int64_t>(s.tokens.size());
      append_token(s, chosen[i], logprobs[i]);
    } catch (const std::exception& e) {  // e.g. its token callback threw
      fail_sequence(s, e.what());
    }
  }
}

// forward_and_sample with the followers of a leader's final prefill step riding along: each
// has its prompt marked cached and, for this pass only, the leader's slots, so paged_forward
// gives it the leader's last hidden row and reads only slots the leader wrote. On success the
// partial last prompt block is copied into the follower's own block and the group dissolves;
// on failure the followers are put back as they were.
std::pair<std::vector<int64_t>, std::vector<float>> Engine::Impl::forward_with_followers(
    const std::vector<std::shared_ptr<Sequence>>& seqs) {
  std::vector<std::pair<Sequence*, at::Tensor>> riding;  // follower, its own slots
  const Sequence* leader = nullptr;
  for (const auto& s : seqs) {
    if (!leader_of.count(s->id)) {
      leader = s.get();
      continue;
    }
    FURLONG_ASSERT(leader && leader->id == leader_of.at(s->id), "follower ", s->id,
                   " is not behind its leader");
    riding.emplace_back(s.get(), s->slots);
    s->slots = leader->slots;
    s->num_cached = s->prompt_len;
  }
  try {
    auto result = forward_and_sample(seqs);
    finish_sharing(seqs, riding);
    return result;
  } catch (...) {
    for (auto& [f, own] : riding) {
      f->slots = own;
      f->num_cached = 0;
    }
    throw;
  }
}

void Engine::Impl::finish_sharing(const std::vector<std::shared_ptr<Sequence>>& seqs,
                                  std::vector<std::pair<Sequence*, at::Tensor>>& riding) {
  const int64_t bs = cache->block_size();
  for (auto& [f, own] : riding) {
    const int64_t from = f->prompt_len / bs * bs;  // the partial last block's positions
    const int64_t n = f->prompt_len - from;
    cache->copy_slots(f->slots.narrow(0, from, n), own.narrow(0, from, n));
    f->slots = own;
    // DeltaNet models: the follower continues from the leader's state after the prompt.
    const RequestId leader = leader_of.at(f->id);
    for (const auto& s : seqs) {
      if (s->id != leader) continue;
      f->linear_state.clear();
      for (const auto& layer : s->linear_state) {
        f->linear_state.push_back({layer.window.defined() ? layer.window.clone() : layer.window,
                                   layer.state.defined() ? layer.state.clone() : layer.state,
                                   {}});
      }
    }
  }
  // Every leader in `seqs` has now prefilled its prompt: no one else may join it.
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [f, own] : riding) leader_of.erase(f->id);
  for (const auto& s : seqs) prefix_groups.erase(s->id);
}

}  // namespace furlong::engine
