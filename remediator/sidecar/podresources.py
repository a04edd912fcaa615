"""Client for the kubelet PodResources v1 gRPC API (List) on its unix socket.

Returns plain dataclasses so the rest of the sidecar never touches protobuf messages. A kubelet that
cannot be reached becomes a 503 Problem naming the socket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio

from remediator.sidecar.problems import Problem
from remediator.sidecar.proto import api_pb2, api_pb2_grpc

__all__ = ["ContainerAllocation", "PodAllocation", "PodResourcesClient"]


@dataclass(frozen=True)
class ContainerAllocation:
    """Devices of one resource allocated to one container."""

    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PodAllocation:
    """A pod on this node and the devices its containers hold."""

    namespace: str
    name: str
    devices: tuple[ContainerAllocation, ...] = field(default_factory=tuple)


class PodResourcesClient:
    """Lists pod device allocations from the kubelet; one channel, opened on first use."""

    def __init__(self, socket_path: Path, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> api_pb2_grpc.PodResourcesListerStub:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(f"unix://{self.socket_path.absolute()}")
        return api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]

    async def list(self) -> list[PodAllocation]:
        try:
            response = await self._stub().List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise Problem(
                503,
                f"kubelet PodResources API at {self.socket_path} unavailable: {exc.code().name}: "
                f"{exc.details()}",
            ) from exc
        pods = []
        for pod in response.pod_resources:
            devices = tuple(
                ContainerAllocation(container.name, dev.resource_name, tuple(dev.device_ids))
                for container in pod.containers
                for dev in container.devices
            )
            pods.append(PodAllocation(pod.namespace, pod.name, devices))
        return pods

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
