#include "kernels/serving/continuous_batcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/serving/paged_kv_cache.h"

namespace paratune::kernels::serving {

absl::Status BatcherLimits::Validate() const {
  if (max_batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size (", max_batch_size, ") must be positive"));
  }
  if (max_num_tokens < max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_num_tokens (", max_num_tokens, ") must be >= max_batch_size (", max_batch_size, ")"));
  }
  if (kv_block_size <= 0 || num_kv_blocks <= 0) {
    return absl::InvalidArgumentError("kv_block_size and num_kv_blocks must be positive");
  }
  if (kv_full_groups < 0 || kv_windowed_groups < 0 || kv_full_groups + kv_windowed_groups < 1 ||
      kv_window < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_full_groups (", kv_full_groups, ") and kv_windowed_groups (", kv_windowed_groups,
        ") must be >= 0 with at least one group, kv_window (", kv_window, ") >= 0"));
  }
  return absl::OkStatus();
}

int64_t ContinuousBatcher::BlocksFor(const Seq& s) const {
  // The last output token is sampled but never written to the cache; prompt chunks are at
  // most max_num_tokens long with chunked prefill.
  const int64_t tokens = s.isl + s.osl - 1, bs = limits_.kv_block_size;
  const int64_t chunk = std::max<int64_t>(
      1, limits_.chunked_prefill ? std::min(s.isl, limits_.max_num_tokens) : s.isl);
  return limits_.kv_full_groups * WholeContextBlocks(tokens, bs) +
         limits_.kv_windowed_groups * WindowedBlocks(tokens, bs, limits_.kv_window, chunk);
}

absl::Status ContinuousBatcher::Add(int64_t seq, int64_t isl, int64_t osl) {
  Seq s;
  s.isl = isl;
  s.osl = osl;
  s.blocks = BlocksFor(s);
  if (s.blocks > limits_.num_kv_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", seq, ": isl + osl (", isl + osl, ") needs ", s.blocks,
                     " KV blocks, more than the cache holds (", limits_.num_kv_blocks, ")"));
  }
  if (!limits_.chunked_prefill && isl > limits_.max_num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", seq, ": isl (", isl, ") exceeds max_num_tokens (",
                     limits_.max_num_tokens, ") without chunked prefill"));
  }
  seqs_[seq] = s;
  waiting_.push_back(seq);
  return absl::OkStatus();
}

absl::Status ContinuousBatcher::AddPrefilled(int64_t seq, int64_t isl, int64_t osl) {
  if (osl < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request ", seq, ": osl (", osl, ") must be >= 2 to decode after a prefill elsewhere"));
  }
  Seq s;
  s.isl = isl;
  s.osl = osl;
  s.prefilled = isl;
  s.generated = 1;
  s.blocks = BlocksFor(s);
  if (s.blocks > limits_.num_kv_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", seq, ": isl + osl (", isl + osl, ") needs ", s.blocks,
                     " KV blocks, more than the cache holds (", limits_.num_kv_blocks, ")"));
  }
  seqs_[seq] = s;
  waiting_.push_back(seq);
  return absl::OkStatus();
}

std::vector<SeqChunk> ContinuousBatcher::Plan() {
  std::vector<SeqChunk> plan;
  int64_t budget = limits_.max_num_tokens;
  for (int64_t id : running_) {
    const Seq& s = seqs_.at(id);
    if (s.prefilled == s.isl && budget > 0) {
      // Decode: the previous output token goes in at position isl + generated − 1.
      plan.push_back({id, s.isl + s.generated - 1, 1, true});
      --budget;
    }
  }
  auto add_prefill = [&](int64_t id) {
    const Seq& s = seqs_.at(id);
    const int64_t left = s.isl - s.prefilled;
    const int64_t n = limits_.chunked_prefill ? std::min(left, budget) : left;
    if (n <= 0 || n > budget) return false;
    plan.push_back({id, s.prefilled, n, s.prefilled + n == s.isl});
    budget -= n;
    return true;
  };
  for (int64_t id : running_) {
    const Seq& s = seqs_.at(id);
    if (s.prefilled < s.isl && budget > 0) add_prefill(id);
  }
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < limits_.max_batch_size) {
    const int64_t id = waiting_.front();
    const Seq& s = seqs_.at(id);
    if (s.blocks > free_blocks()) break;  // first come, first served: no overtaking
    if (s.prefilled == s.isl) {           // prefilled elsewhere: it decodes at once
      plan.push_back({id, s.isl + s.generated - 1, 1, true});
      --budget;
    } else if (!add_prefill(id)) {
      break;
    }
    used_blocks_ += s.blocks;
    running_.push_back(id);
    waiting_.pop_front();
  }
  return plan;
}

std::vector<TokenEvent> ContinuousBatcher::Commit(const std::vector<SeqChunk>& plan) {
  std::vector<TokenEvent> events;
  for (const SeqChunk& c : plan) {
    Seq& s = seqs_.at(c.seq);
    if (s.prefilled < s.isl) {
      s.prefilled += c.num_tokens;
      if (!c.sample) continue;
    }
    ++s.generated;
    TokenEvent e;
    e.seq = c.seq;
    e.first = s.generated == 1;
    e.finished = s.generated == s.osl;
    events.push_back(e);
    if (e.finished) {
      used_blocks_ -= s.blocks;
      running_.erase(std::find(running_.begin(), running_.end(), c.seq));
      seqs_.erase(c.seq);
    }
  }
  return events;
}

}  // namespace paratune::kernels::serving
