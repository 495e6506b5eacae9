// One ranked layout of a finished job as the text `paratune export` prints for it
// (search/exporters.h: Megatron-LM arguments, a NeMo override; for an inference job
// inference/exporters.h: the trtllm-serve, vllm serve or SGLang command), or as its
// RankedConfig (InferenceRankedConfig) in the proto JSON mapping. The coordinator is the one place that renders exports; the
// dashboard downloads them.
#ifndef PARATUNE_SERVER_REST_EXPORT_H_
#define PARATUNE_SERVER_REST_EXPORT_H_

#include "absl/status/statusor.h"
#include "paratune/v1/job.pb.h"
#include "server/rest_common.h"
#include "server/rest_requests.h"

namespace paratune::server {

/// The export of layout `request.rank` of `results` for `job`'s spec. NotFound when the
/// plan ranked fewer layouts; InvalidArgument when the spec or the layout cannot be
/// read back or exported (the exporter's message), or when the format is not one of the
/// job's kind (megatron and nemo for training, trtllm, vllm and sglang for inference).
absl::StatusOr<RestBody> RenderExport(const ExportRequest& request, const v1::Job& job,
                                      const v1::JobResults& results);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_REST_EXPORT_H_
