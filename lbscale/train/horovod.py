"""The Horovod engine (`--engine horovod`): the ranks joined by `hvd.init`, the gradients averaged by
`hvd.DistributedOptimizer` around lbscale's own optimizers, the rest of the trial's collectives on Horovod too.

What it does as DDP does, so that a trial is the same trial under either engine:
- parameters broadcast from rank 0 at the start, the optimizer's state tensors after a resume (a fresh trial's
  state is empty on every rank; Horovod's own `broadcast_optimizer_state` would first take a zero-gradient step to
  create it, and with weight decay that step moves the weights);
- buffers (BatchNorm's running statistics) broadcast from rank 0 before each step's first forward, where DDP's
  `broadcast_buffers` does (before a forward that follows a synchronised one);
- gradients averaged over the ranks once a step, after its last micro-batch (`backward_passes_per_step` set per
  micro-batch: a kept partial last step or a batch schedule has fewer), so LARS / LAMB take their trust ratios on
  the averaged gradient;
- the exposed communication: the wait in `synchronize()` once the backward is done (DDP's: the wait inside the
  backward after the last bucket, `commtime.CommTimer`).

How the ranks find each other: locally `horovodrun --gloo` starts them and its rendezvous; inside a SLURM job srun
starts them (as under DDP, so preemption and requeueing are the same) and the array task runs Horovod's HTTP
rendezvous server on the job's first node (`Rendezvous`), each rank taking its place from srun's variables
(`slot_env`).
"""

from __future__ import annotations

import os
import time

import torch

from lbscale.errors import LbscaleError

_hvd = None  # horovod.torch once this process joined (init)
NEVER = 1 << 30  # backward passes before an all-reduce where a micro-batch is not its step's last


def module():
    """horovod.torch, or one line saying how to get it."""
    try:
        import horovod.torch as hvd
    except ImportError as e:
        raise LbscaleError(f"--engine horovod: Horovod is not importable here ({e}); `make horovod` builds it into "
                           "the project's venv, or load your cluster's Horovod module (lbscale doctor says which "
                           "it finds)") from None
    return hvd


def check_available() -> None:
    """One line and exit 2 before anything starts where this node lacks Horovod or its Gloo controller."""
    hvd = module()
    if not hvd.gloo_built():
        raise LbscaleError("--engine horovod: this Horovod was built without Gloo (lbscale starts its ranks with "
                           "horovodrun --gloo or srun and a Gloo rendezvous); rebuild it with make horovod")


def slot_plan(world: int, per_node: int, hosts: list[str]) -> list[dict]:
    """Each rank's place, block by block as srun places `--ntasks-per-node` tasks: its host, local rank and size,
    cross rank (its node among those with that local rank) and cross size."""
    plan = []
    for rank in range(world):
        node, local = divmod(rank, per_node)
        on_node = min(per_node, world - node * per_node)
        cross = sum(1 for n in range(len(hosts)) if local < min(per_node, world - n * per_node))
        plan.append({"hostname": hosts[node], "rank": rank, "local_rank": local, "cross_rank": node, "size": world,
                     "local_size": on_node, "cross_size": cross})
    return plan


def slot_env(rank: int, world: int, per_node: int, hosts: list[str]) -> dict:
    """The HOROVOD_* variables of one srun-started rank (what horovodrun would set)."""
    s = slot_plan(world, per_node, hosts)[rank]
    return {"HOROVOD_HOSTNAME": s["hostname"], "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(world),
            "HOROVOD_LOCAL_RANK": str(s["local_rank"]), "HOROVOD_LOCAL_SIZE": str(s["local_size"]),
            "HOROVOD_CROSS_RANK": str(s["cross_rank"]), "HOROVOD_CROSS_SIZE": str(s["cross_size"]),
            "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}


class Rendezvous:
    """Horovod's HTTP rendezvous server for the ranks srun starts (what horovodrun runs for its own): started in
    the array task on the job's first node; `env` is what every rank needs to reach it and take its place."""

    def __init__(self, world: int, per_node: int, hosts: list[str], addr: str, iface: str | None = None):
        from horovod.runner.common.util.hosts import SlotInfo
        from horovod.runner.http.http_server import RendezvousServer

        self.server = RendezvousServer()
        port = self.server.start()
        self.server.init([SlotInfo(**s) for s in slot_plan(world, per_node, hosts)])
        self.env = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": addr, "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                    "LBSCALE_HOROVOD_HOSTS": ",".join(hosts), "LBSCALE_HOROVOD_PER_NODE": str(per_node)}
        if iface:  # the interface Gloo's transport binds to (the profile's GLOO_SOCKET_IFNAME), else the host's
            self.env["HOROVOD_GLOO_IFACE"] = iface

    def stop(self) -> None:
        self.server.stop()


def init(env, device: torch.device) -> str:
    """Join the ranks (`env`: where this process runs, dist.DistEnv); the operations' name. Under srun the rank
    takes its place from the array task's rendezvous (`Rendezvous.env`) and srun's variables."""
    global _hvd
    hvd = module()
    if env.launcher == "slurm":
        if "LBSCALE_HOROVOD_HOSTS" not in os.environ:
            raise LbscaleError("--engine horovod under srun: the ranks need the array task's rendezvous "
                               "(run it through lbscale sweep --launcher slurm)")
        hosts = os.environ["LBSCALE_HOROVOD_HOSTS"].split(",")
        os.environ.update(slot_env(env.rank, env.world_size, int(os.environ["LBSCALE_HOROVOD_PER_NODE"]), hosts))
    hvd.init()
    if hvd.size() != env.world_size:
        raise LbscaleError(f"--engine horovod: Horovod joined {hvd.size()} ranks where the launcher started "
                           f"{env.world_size}; start the ranks with horovodrun (or lbscale sweep)")
    _hvd = hvd
    return "horovod-nccl" if device.type == "cuda" and hvd.nccl_built() else "horovod-gloo"


def active() -> bool:
    return _hvd is not None


def barrier() -> None:
    _hvd.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    t.copy_(_hvd.allreduce(t, op=_hvd.Sum))
    return t


def all_gather_object(obj) -> list:
    return _hvd.allgather_object(obj)


def shutdown() -> None:
    global _hvd
    if _hvd is not None:
        _hvd.shutdown()
        _hvd = None


def broadcast(tensors: list[torch.Tensor], what: str) -> None:
    """Rank 0's values of `tensors` on every rank, in place. Horovod sends contiguous tensors only: a channels_last
    weight goes through a contiguous copy."""
    bufs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    handles = [_hvd.broadcast_async_(b, root_rank=0, name=f"lbscale.{what}.{i}") for i, b in enumerate(bufs)]
    for h in handles:
        _hvd.synchronize(h)
    for t, b in zip(tensors, bufs):
        if b is not t:
            t.copy_(b)


def contiguous_compression():
    """Horovod's gradient "compression" hook used to send a channels_last gradient as a contiguous copy (Horovod
    all-reduces contiguous tensors only) and to hand it back in the parameter's layout; the values unchanged."""
    from horovod.torch.compression import Compressor

    class Contiguous(Compressor):
        @staticmethod
        def compress(tensor):
            if tensor.is_contiguous():
                return tensor, None
            channels_last = tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last)
            return tensor.contiguous(), torch.channels_last if channels_last else torch.contiguous_format

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.contiguous(memory_format=ctx)

    return Contiguous


class HorovodUpdate:
    """The optimizer wrapped in `hvd.DistributedOptimizer`, the model's parameters broadcast from rank 0, and
    what a step does around it (the module's note)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device):
        hvd = _hvd
        broadcast(list(model.state_dict().values()), "parameters")
        self.cuda = device.type == "cuda"
        self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                                  compression=contiguous_compression(), op=hvd.Average)
        self.buffers = list(model.buffers())
        self.seconds = 0.0
        self.step_begins = True  # the next forward is its step's first

    def before_forward(self) -> None:
        """Rank 0's buffers on every rank before a step's first forward, as DDP broadcasts them."""
        if self.buffers and self.step_begins:
            broadcast(self.buffers, "buffers")

    def before_backward(self, last: bool) -> None:
        """The gradients are all-reduced as this backward produces them where it is its step's last; else they
        accumulate here."""
        self.optimizer.set_backward_passes_per_step(1 if last else NEVER)
        self.step_begins = last

    def step(self, scaler: torch.amp.GradScaler) -> None:
        """The optimizer step through `scaler` on the averaged gradients: first the wait for them (counted as
        exposed communication), then the step itself, which must not synchronize again."""
        if self.cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        self.optimizer.synchronize()
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - start
        with self.optimizer.skip_synchronize():
            scaler.step(self.optimizer)

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds

    def broadcast_state(self) -> None:
        """Rank 0's optimizer state on every rank (after a resume; a fresh trial's state is empty everywhere):
        each parameter's state tensors, in the parameters' order (every rank loaded the same checkpoint, so the
        same keys)."""
        state = [v for group in self.optimizer.param_groups for p in group["params"]
                 for _, v in sorted(self.optimizer.state.get(p, {}).items()) if torch.is_tensor(v)]
        if state:
            broadcast(state, "state")
