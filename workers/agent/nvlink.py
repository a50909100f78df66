"""NVLink topology of one node: who is linked to whom, and the connected domains the scheduler
places gangs in. Pure functions over what `NvmlReader` read; no NVML calls here."""

from collections import defaultdict
from collections.abc import Iterable


def nvlink_peers(pci: dict[str, str], endpoints: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each GPU's NVLink peers, from the PCI address of every link's far end (`pci`: address ->
    GPU uuid; `endpoints`: GPU uuid -> far-end addresses). GPUs whose links meet at the same
    NVSwitch are peers of one another."""
    peers: dict[str, set[str]] = {uuid: set() for uuid in endpoints}
    sharing: dict[str, set[str]] = defaultdict(set)  # non-GPU endpoint (NVSwitch) -> GPUs
    for uuid, ends in endpoints.items():
        for end in ends:
            other = pci.get(end)
            if other is None:
                sharing[end].add(uuid)
            elif other != uuid:
                peers[uuid].add(other)
                peers.setdefault(other, set()).add(uuid)
    for group in sharing.values():
        for uuid in group:
            peers[uuid] |= group - {uuid}
    return peers


def nvlink_domains(inventory: Iterable[dict]) -> dict[str, str]:
    """NVLink-connected components of one node's GPUs: "nvl0", "nvl1"... numbered in the order
    of their lowest GPU index; "" for a GPU with no NVLink peer."""
    gpus = sorted(inventory, key=lambda gpu: gpu["index"])
    graph: dict[str, set[str]] = defaultdict(set)
    for gpu in gpus:
        for peer in gpu["nvlink_peers"]:  # links are symmetric even if one side did not say so
            graph[gpu["uuid"]].add(peer)
            graph[peer].add(gpu["uuid"])
    domains: dict[str, str] = {}
    count = 0
    for gpu in gpus:
        start = gpu["uuid"]
        if start in domains:
            continue
        if not graph[start]:
            domains[start] = ""
            continue
        name, count = f"nvl{count}", count + 1
        stack = [start]
        while stack:
            uuid = stack.pop()
            if uuid not in domains:
                domains[uuid] = name
                stack.extend(graph[uuid])
    return {gpu["uuid"]: domains[gpu["uuid"]] for gpu in gpus}
