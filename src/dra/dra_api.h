// SPDX-License-Identifier: Apache-2.0
// The kubelet's DRA service in its two versions (proto/dra_v1.proto, dra_v1beta1.proto): the same
// messages in two packages. A namespace cannot be a template argument, so each version's types are
// gathered under the same names in a struct, and one template serves (or calls) both.
#pragma once

#include "dra/proto/dra_v1.grpc.pb.h"
#include "dra/proto/dra_v1beta1.grpc.pb.h"

namespace gpuos::dra {

template <typename Plugin, typename PrepareRequest, typename PrepareResponse, typename UnprepareRequest,
          typename UnprepareResponse>
struct DraApi {
  using DRAPlugin = Plugin;
  using NodePrepareResourcesRequest = PrepareRequest;
  using NodePrepareResourcesResponse = PrepareResponse;
  using NodeUnprepareResourcesRequest = UnprepareRequest;
  using NodeUnprepareResourcesResponse = UnprepareResponse;
};

namespace dra_v1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;
using DraV1 = DraApi<dra_v1::DRAPlugin, dra_v1::NodePrepareResourcesRequest, dra_v1::NodePrepareResourcesResponse,
                     dra_v1::NodeUnprepareResourcesRequest, dra_v1::NodeUnprepareResourcesResponse>;
using DraV1beta1 =
    DraApi<dra_v1beta1::DRAPlugin, dra_v1beta1::NodePrepareResourcesRequest, dra_v1beta1::NodePrepareResourcesResponse,
           dra_v1beta1::NodeUnprepareResourcesRequest, dra_v1beta1::NodeUnprepareResourcesResponse>;

}  // namespace gpuos::dra
