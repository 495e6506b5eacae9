// A Gloo rendezvous over the coordinator's paratune.v1.Rendezvous service
// (proto/paratune/v1/rendezvous.proto), so that worker processes on different nodes can
// form one Gloo job (as torch's TCPStore does): every rank Sets its address under a shared
// namespace and Gets the others'.
//
// Thread-safe: the ranks of one process may share one instance (RunTraining does).
#ifndef PARATUNE_WORKER_GRPC_RENDEZVOUS_H_
#define PARATUNE_WORKER_GRPC_RENDEZVOUS_H_

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "kernels/communicator.h"

namespace paratune::worker {

/// A kernels::GlooRendezvous over the coordinator's Rendezvous service. Keys are stored under
/// `ns`; Get blocks until the key is set or `timeout` passes (then it throws
/// std::runtime_error naming the key and the namespace, which Gloo's store contract allows).
///
/// `token` is sent as `authorization: Bearer <token>` (the worker token; empty = none), as
/// WorkerDaemon does. Set also throws std::runtime_error (naming the key, the namespace and
/// the gRPC status) when the coordinator refuses it or stays unreachable for `timeout`;
/// UNAVAILABLE and DEADLINE_EXCEEDED answers are retried with backoff until then.
std::shared_ptr<kernels::GlooRendezvous> MakeGrpcRendezvous(
    std::shared_ptr<grpc::Channel> channel, std::string token, std::string ns,
    std::chrono::milliseconds timeout);

}  // namespace paratune::worker

#endif  // PARATUNE_WORKER_GRPC_RENDEZVOUS_H_
