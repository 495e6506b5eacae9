// The layout's two forms, domain (core/parallel_config.h) and wire (v1::ParallelConfig), and
// the one conversion between them. A library of its own (paratune_convert_layout: core and
// proto only) so that the worker reads a VerifyTask's layout with the conversion the
// coordinator writes it with, without linking the coordinator.
//
// Every field of the domain layout has a wire field, and
// ParallelConfigFromProto(ToProto(c)) == c for every layout (tests/server/convert_test.cc).
#ifndef PARATUNE_SERVER_CONVERT_LAYOUT_H_
#define PARATUNE_SERVER_CONVERT_LAYOUT_H_

#include "absl/status/statusor.h"
#include "core/parallel_config.h"
#include "paratune/v1/results.pb.h"

namespace paratune::server {

/// Every field of the layout. overlap_grad_reduce, overlap_p2p_comm and
/// overlap_param_gather (on by default) are always set, so the wire says off explicitly.
v1::ParallelConfig ToProto(const ParallelConfig& config);
/// The layout back; a wire layout without overlap_grad_reduce / overlap_p2p_comm /
/// overlap_param_gather gets the domain default (on). InvalidArgument naming `recompute` for an
/// unknown mode.
absl::StatusOr<ParallelConfig> ParallelConfigFromProto(const v1::ParallelConfig& config);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_CONVERT_LAYOUT_H_
