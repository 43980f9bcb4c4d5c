// Flags of multi-turn agent episodes (part of the flag table, see flag_table.cpp).
#pragma once

#include "config/flags.h"
#include "rollout/agent_options.h"

namespace furlong::app {

// --agent-env-url, --agent-max-turns, --agent-max-episode-tokens, --agent-env-timeout,
// --agent-env-max-retries, --agent-env-concurrency (docs/agents.md).
void add_agent_flags(config::FlagSet& flags, rollout::AgentOptions& agent);

}  // namespace furlong::app
