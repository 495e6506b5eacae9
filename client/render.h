// What the `paratune` CLI prints: the ranked table, the CSV, one estimated layout in words,
// progress lines, the verification lines, and the --json output (the proto JSON mapping of
// the wire messages, server/convert.h WireJson: the dialect REST serves, so `plan --json`
// and `results --json` print one RankedConfig the same way).
#ifndef PARATUNE_CLIENT_RENDER_H_
#define PARATUNE_CLIENT_RENDER_H_

#include <string>

#include "paratune/v1/job.pb.h"
#include "search/plan_result.h"
#include "search/specs.h"

namespace paratune::client {

/// The ranked layouts as a table that fits 80 columns, with a header naming the job and a
/// summary line; notes of the best layout follow.
std::string FormatPlanTable(const PlanResult& result, const JobSpec& spec);

/// One estimated layout in words: the figures, the time and memory breakdowns, the notes.
std::string FormatEstimate(const RankedConfig& estimate, const JobSpec& spec);

/// One CSV row per candidate: the ranked ones, then every rejected one with its reason.
std::string FormatPlanCsv(const PlanResult& result);

/// `plan --json`: the PlanResult as a coordinator stores and serves it (server/convert.h
/// ToProto: the first kMaxRejectedListed rejected layouts listed, all counted by rule).
std::string PlanJson(const PlanResult& result);

/// `estimate --json`: the RankedConfig message.
std::string EstimateJson(const RankedConfig& estimate);

/// One progress line: job id, state, a bar of tasks done/total, cached, failed, ETA.
std::string ProgressLine(const v1::Job& job);

/// One line per ranked layout that has a verification status: measured next to predicted
/// iteration time and peak memory with the prediction error, or why it was not verified;
/// then the verification summary's verdict. Empty when nothing was verified.
std::string VerificationLines(const v1::PlanResult& plan);

/// `results`: the ranked table of a job (FormatPlanTable), where the figures come from, the
/// rejected layouts per rule when only some are listed, and the verification lines. The
/// results' JSON when the plan or the spec does not convert.
std::string ResultsTable(const v1::JobResults& results, const v1::JobSpec& spec);

}  // namespace paratune::client

#endif  // PARATUNE_CLIENT_RENDER_H_
