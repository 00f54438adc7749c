"""`lbscale doctor`: is this node ready for lbscale? One line per check, as each finishes, then the outcome.

Each check is a function returning a `CheckResult` (ok, failed or skipped, and on a failure what to do), so
tests call them one by one. GPU checks are thin library calls; without a GPU they skip, and a skip is never a
failure. The all-reduce check starts its own processes (NCCL on every local GPU, else two on gloo), which
meet at a store on 127.0.0.1 on a port the system picks.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.slurm import SlurmEnv

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
NO_GPU = "no GPU"
BF16_TOLERANCE = 1e-2  # relative error: bf16 keeps 8 mantissa bits, rounding the inputs alone gives about 3e-3
JPEG_TOLERANCE = 2.0  # mean absolute difference in 8-bit levels: IDCTs differ by +-1 here and there
ALLREDUCE_FLOATS = 1 << 20  # 4 MiB of float32: big enough to use the links, quick on a CPU
ALLREDUCE_TIMEOUT = 120.0  # seconds, the new processes' import of torch included
# docs/benchmarks.md states the loader's target for SAT-4-sized images (28x28x4 uint8) read by one process.
LOADER_TARGET, LOADER_TARGET_BYTES = 50_000, 28 * 28 * 4
# Nothing is stated for larger or JPEG images, so they are held to what one GPU consumes: ResNet-50 at 224 px
# in bf16 trains at roughly 2,000 img/s on an A100-class GPU, and each rank reads its own shard.
GPU_DEMAND = 2_000


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome: status ok / failed / skipped, what was found, and what to do where it failed."""

    name: str
    status: str
    detail: str
    advice: str | None = None

    def line(self) -> str:
        """What the command prints after the check's name."""
        return f"{self.status}: {self.detail}" + (f" -> {self.advice}" if self.advice else "")


@dataclass
class DoctorOptions:
    """The command's options; `data_seconds` is how long the data check reads."""

    system: str | None = None
    systems_file: Path | None = None
    data_path: Path | None = None
    json_path: Path | None = None
    data_seconds: float = 3.0


def _one_line(e: BaseException) -> str:
    """An exception as one line: torch's messages often open with a 'raised:' line and go on below it."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    return f"{type(e).__name__}: {text}"[:300]


# --- the software ------------------------------------------------------------------------------------
def check_torch() -> CheckResult:
    """torch's version, the CUDA it was built for and its NCCL."""
    import torch

    if torch.version.cuda is None:
        return CheckResult("torch", OK, f"{torch.__version__}, CPU-only build (CUDA: none, NCCL: not built)")
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except (AttributeError, RuntimeError):
        nccl = "not built"
    return CheckResult("torch", OK, f"{torch.__version__}, CUDA {torch.version.cuda} build, NCCL {nccl}")


def check_libraries() -> CheckResult:
    """timm and torchmetrics import."""
    import importlib

    found, missing = [], []
    for name in ("timm", "torchmetrics"):
        try:
            found.append(f"{name} {importlib.import_module(name).__version__}")
        except Exception as e:  # a broken install raises more than ImportError
            missing.append(f"{name}: {_one_line(e)}")
    if missing:
        return CheckResult("libraries", FAILED, "; ".join(missing), "pip install -e . (lbscale's dependencies)")
    return CheckResult("libraries", OK, ", ".join(found))


# --- the GPUs ----------------------------------------------------------------------------------------
def check_horovod() -> CheckResult:
    """Horovod, the optional second engine (`--engine horovod`): its version, controllers and operations; a skip
    where it is not installed."""
    try:
        import horovod
        import horovod.torch as hvd
    except ImportError as e:
        return CheckResult("horovod", SKIPPED, f"not installed (optional: --engine horovod; {_one_line(e)})",
                           "make horovod, or load your cluster's Horovod module")
    except Exception as e:  # built against another torch: an undefined symbol at import
        return CheckResult("horovod", FAILED, _one_line(e), "rebuild it against this torch: make horovod")
    controllers = [n for n, built in (("gloo", hvd.gloo_built()), ("mpi", hvd.mpi_built())) if built]
    ops = [n for n in ("nccl", "ddl", "ccl", "cuda", "rocm") if getattr(hvd, f"{n}_built", lambda: False)()]
    detail = (f"{horovod.__version__}; controllers: {', '.join(controllers) or 'none'}; GPU operations: "
              f"{', '.join(ops) or 'none (CPU tensors on the controller)'}")
    if "gloo" not in controllers:
        return CheckResult("horovod", FAILED, detail, "lbscale starts its ranks on Gloo: rebuild with make horovod")
    return CheckResult("horovod", OK, detail)


def _driver_gpus() -> int:
    """GPUs `nvidia-smi -L` lists; 0 where there is no nvidia-smi or it fails."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def _slurm_gpus(environ=None) -> int:
    # SlurmEnv does not carry the job's GPUs; SLURM sets this where the job asked for --gres / --gpus.
    value = (os.environ if environ is None else environ).get("SLURM_GPUS_ON_NODE", "")
    return int(value) if value.isdigit() else 0


def check_gpus(environ=None) -> CheckResult:
    """The GPUs torch sees; a failure where the driver or SLURM has GPUs that torch cannot use."""
    import torch

    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        gib = torch.cuda.get_device_properties(0).total_memory / 2**30
        kinds = ", ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))
        return CheckResult("gpus", OK, f"{len(names)}: {kinds} ({gib:.0f} GiB on GPU 0)")
    listed, given = _driver_gpus(), _slurm_gpus(environ)
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    if listed or given:
        where = f"nvidia-smi lists {listed}" if listed else f"SLURM gave this job {given}"
        return CheckResult("gpus", FAILED, f"{where} GPU(s), but torch ({build}) sees none",
                           "install a torch built for a CUDA the driver supports; check CUDA_VISIBLE_DEVICES")
    return CheckResult("gpus", SKIPPED, f"{NO_GPU} (torch is a {build}; the driver lists none)")


def _on_gpu(name: str):
    """A GPU check runs on the device given (tests pass "cpu"), else on the first GPU; without one it skips."""
    def wrap(check):
        @functools.wraps(check)
        def run(device=None) -> CheckResult:
            import torch

            if device is None and not torch.cuda.is_available():
                return CheckResult(name, SKIPPED, NO_GPU)
            return check(torch.device(device) if device is not None else torch.device("cuda", 0))
        return run
    return wrap


def bf16_matmul_error(device) -> float:
    """Relative error of a 256 x 256 bf16 matmul on `device` against float32 on the CPU."""
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    got = (a.to(device, torch.bfloat16) @ b.to(device, torch.bfloat16)).float().cpu()
    return float((got - a @ b).norm() / (a @ b).norm())


@_on_gpu("bf16")
def check_bf16(device) -> CheckResult:
    """A bf16 matmul on the GPU gives float32's result within bf16's precision."""
    import torch

    err = bf16_matmul_error(device)
    if err > BF16_TOLERANCE:
        return CheckResult("bf16", FAILED, f"matmul on {device} off by {err:.2g} (relative; bf16 gives < "
                           f"{BF16_TOLERANCE})", "train with --precision fp32; report the GPU and driver")
    native = device.type != "cuda" or torch.cuda.is_bf16_supported(including_emulation=False)
    note = "" if native else " (emulated on this GPU: slow, prefer --precision fp16)"
    return CheckResult("bf16", OK, f"matmul on {device} matches float32 (relative error {err:.1e}){note}")


def _tiny_model(device):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to(device)
    return model.eval(), torch.randn(16, 32, device=device)


@_on_gpu("compile")
def check_compile(device) -> CheckResult:
    """torch.compile of a tiny model runs and matches eager (inductor needs Triton and a C compiler)."""
    import torch

    model, x = _tiny_model(device)
    start = time.perf_counter()
    with torch.no_grad():
        eager, compiled = model(x), torch.compile(model)(x)
    seconds, diff = time.perf_counter() - start, float((compiled - eager).abs().max())
    if not torch.allclose(compiled, eager, rtol=1e-3, atol=1e-4):
        return CheckResult("compile", FAILED, f"compiled output differs from eager by {diff:.2g}",
                           "train without --compile")
    return CheckResult("compile", OK, f"tiny model compiled in {seconds:.1f} s, matches eager (max diff {diff:.1e})")


@_on_gpu("cuda-graph")
def check_cuda_graph(device) -> CheckResult:
    """Capture a tiny forward pass as a CUDA graph and replay it on new input (compile's reduce-overhead mode)."""
    import torch

    if device.type != "cuda":
        return CheckResult("cuda-graph", SKIPPED, NO_GPU)
    model, static_in = _tiny_model(device)
    with torch.no_grad():
        side = torch.cuda.Stream(device)  # warm up off the capturing stream, as torch.cuda.graphs asks
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            model(static_in)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(static_in)
        fresh = torch.randn_like(static_in)
        static_in.copy_(fresh)
        graph.replay()
        diff = float((static_out - model(fresh)).abs().max())
    if diff > 1e-5:
        return CheckResult("cuda-graph", FAILED, f"replay differs from eager by {diff:.2g}",
                           "train with --compile-mode default (no CUDA graphs)")
    return CheckResult("cuda-graph", OK, "captured and replayed a tiny forward pass: matches eager")


def jpeg_decode_difference(device) -> float:
    """Mean absolute difference between torchvision's decode of a small in-memory JPEG on `device` and PIL's."""
    import io

    import numpy as np
    import torch
    from PIL import Image
    from torchvision.io import decode_jpeg

    y, x = np.mgrid[0:48, 0:64]
    buffer = io.BytesIO()
    Image.fromarray(np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)).save(
        buffer, format="JPEG", quality=90, subsampling=0)
    got = decode_jpeg(torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8), device=device)
    ref = torch.from_numpy(np.array(Image.open(buffer).convert("RGB"))).permute(2, 0, 1)
    return float((got.cpu().int() - ref.int()).abs().float().mean())


@_on_gpu("nvjpeg")
def check_nvjpeg(device) -> CheckResult:
    """nvjpeg (torchvision.io.decode_jpeg on the GPU) decodes a JPEG as PIL does."""
    diff = jpeg_decode_difference(device)
    if diff > JPEG_TOLERANCE:
        return CheckResult("nvjpeg", FAILED, f"decode on {device} differs from PIL's by {diff:.2f} levels on average",
                           "prepare JPEG datasets with --encoding raw; report torchvision's version and the GPU")
    return CheckResult("nvjpeg", OK, f"decode_jpeg on {device} matches PIL (mean difference {diff:.2f} levels)")


# --- the collective ----------------------------------------------------------------------------------
def allreduce_rank(rank, world, backend: str, port, timeout) -> None:
    """One process of the all-reduce check: sum a known tensor, time it, post the result to the check's store."""
    import torch
    import torch.distributed as dist

    from lbscale.train.distributed import timed_all_reduce

    rank, world, wait = int(rank), int(world), timedelta(seconds=float(timeout))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo binds where the host name resolves, maybe elsewhere
    store = dist.TCPStore("127.0.0.1", int(port), None, False, wait)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=wait)
    try:
        x, times, worst = torch.empty(ALLREDUCE_FLOATS, device=device), [], 0.0
        for _ in range(6):  # the first connects the ranks and is not timed
            x.fill_(rank + 1.0)
            times.append(timed_all_reduce(x))
            worst = max(worst, float((x - world * (world + 1) / 2).abs().max()))
        store.set(f"doctor/rank{rank}", json.dumps({"seconds": sorted(times[1:])[2], "error": worst}))
    finally:
        dist.destroy_process_group()


def _wait_all(procs: list, logs: list, timeout: float) -> str | None:
    """Wait for the rank processes: None when all exited 0, else why not (the others are then stopped)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]
            for rank, code in enumerate(codes):
                if code not in (None, 0):  # its traceback's last line says what went wrong
                    logs[rank].seek(0)
                    lines = [s for s in logs[rank].read().decode(errors="replace").splitlines() if s.strip()]
                    return f"rank {rank} exited {code}: {lines[-1].strip() if lines else 'no output'}"
            if all(c == 0 for c in codes):
                return None
            time.sleep(0.1)
        return f"no result within {timeout:.0f} s"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def check_allreduce(timeout: float = ALLREDUCE_TIMEOUT) -> CheckResult:
    """All-reduce 1..N on every local GPU with NCCL, or on 2 gloo processes without one; check the sum, time it."""
    import tempfile

    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend, world = ("nccl", gpus) if gpus else ("gloo", 2)
    what = f"{backend}, {world} processes on 127.0.0.1, {ALLREDUCE_FLOATS * 4 >> 20} MiB"
    if not dist.is_available() or (backend == "nccl" and not dist.is_nccl_available()):
        return CheckResult("allreduce", FAILED, f"torch has no {backend} backend", "install a torch built with it")
    # port 0: the store takes a free port, which no other process can take between choosing and binding
    store = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=timeout), wait_for_workers=False)
    # fresh interpreters that import lbscale.doctor only (multiprocessing's spawn would rerun the caller's __main__)
    code = "import sys; from lbscale.doctor import allreduce_rank; allreduce_rank(*sys.argv[1:])"
    logs = [tempfile.TemporaryFile() for _ in range(world)]
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code, str(r), str(world), backend, str(store.port),
                                   str(timeout)], stdout=log, stderr=subprocess.STDOUT) for r, log in enumerate(logs)]
        why = _wait_all(procs, logs, timeout)
    finally:
        for log in logs:
            log.close()
    if why:
        return CheckResult("allreduce", FAILED, f"{what}: {why}", "NCCL_DEBUG=INFO / TORCH_DISTRIBUTED_DEBUG=DETAIL "
                           "show where it stops; check the NCCL_* and GLOO_* settings")
    ranks = [json.loads(store.get(f"doctor/rank{r}")) for r in range(world)]
    seconds, error = max(r["seconds"] for r in ranks), max(r["error"] for r in ranks)
    if error:
        return CheckResult("allreduce", FAILED, f"{what}: wrong sum (off by {error:g})", "report the GPUs and NCCL")
    return CheckResult("allreduce", OK, f"{what}: sum correct, {seconds * 1e3:.2f} ms (median of 5)")


# --- the cluster -------------------------------------------------------------------------------------
def check_slurm(environ=None) -> CheckResult:
    """sinfo / srun on PATH; inside a job its id, nodes, CPUs per task and GPUs; outside one a skip."""
    env = SlurmEnv.current(environ)
    tools = [t for t in ("sinfo", "srun") if shutil.which(t)]
    found = f"{', '.join(tools)} on PATH" if tools else "no sinfo or srun on PATH"
    if not env.in_job:
        return CheckResult("slurm", SKIPPED, f"not in a SLURM job ({found})")
    if "srun" not in tools:
        return CheckResult("slurm", FAILED, f"job {env.job_name}, but {found}", "load the SLURM module (lbscale "
                           "starts srun steps)")
    cpus = env.cpus_per_task or "unset (srun gives 1)"
    gpus = _slurm_gpus(environ) or "none (no --gres)"
    return CheckResult("slurm", OK, f"job {env.job_name} on {env.nodelist}: CPUs per task {cpus}, GPUs per node "
                                    f"{gpus}; {found}")


def _listen_and_connect(address: str) -> float:
    """Open a listening socket on `address` and connect to it; the seconds that took."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind((address, 0))
        server.listen(1)
        start = time.perf_counter()
        with socket.create_connection(server.getsockname(), timeout=5):
            server.accept()[0].close()
        return time.perf_counter() - start


def check_system(profile: dict, environ=None) -> CheckResult:
    """The cluster profile's values; inside a job, its rendezvous address resolves and, on the first node (where
    rank 0 listens), takes a connection."""
    from lbscale.slurm import step_env

    env, name = SlurmEnv.current(environ), profile["name"]
    if not env.in_job:
        values = ", ".join(f"{k} {profile.get(k)}" for k in ("partition", "account", "time", "gpus_per_node",
                                                               "cpus_per_task", "rendezvous_suffix"))
        return CheckResult("system", OK, f"{name}: {values}; rendezvous not checked (not in a SLURM job)")
    fix = f"set rendezvous_suffix or environment: MASTER_ADDR in your own profile (--systems FILE, extends: {name})"
    address = "(none)"
    try:  # the address a sweep's array task would give its ranks
        address = step_env(env, profile)["LBSCALE_MASTER_ADDR"]
        ip = socket.gethostbyname(address)
    except LbscaleError as e:
        return CheckResult("system", FAILED, str(e), fix)
    except OSError:
        return CheckResult("system", FAILED, f"{name}: rendezvous {address} does not resolve here", fix)
    first, this = env.hostnames()[0], socket.gethostname()
    if first.split(".")[0] != this.split(".")[0] and not ip.startswith("127."):
        return CheckResult("system", OK, f"{name}: rendezvous {address} -> {ip} resolves; connection not tried "
                                         f"(this is {this}, not the first node {first}, where rank 0 listens)")
    try:
        seconds = _listen_and_connect(ip)
    except OSError as e:
        return CheckResult("system", FAILED, f"{name}: cannot listen on and connect to rendezvous {address} -> "
                                             f"{ip} ({e.strerror or e})", fix)
    return CheckResult("system", OK, f"{name}: rendezvous {address} -> {ip}: listened, connected in "
                                     f"{seconds * 1e3:.1f} ms")


# --- the data ----------------------------------------------------------------------------------------
def data_target(image_bytes: int | None) -> tuple[int, str]:
    """The read rate (img/s, one process) a file is held to, and where that figure comes from."""
    if image_bytes is not None and image_bytes <= LOADER_TARGET_BYTES:
        return LOADER_TARGET, "the loader's target for SAT-4-sized images, docs/benchmarks.md"
    return GPU_DEMAND, "one GPU's ResNet-50 pace at 224 px in bf16; no loader target is stated for these images"


def _read_for(loader, seconds: float) -> tuple[int, float]:
    """Images the loader gives in about `seconds` (epoch after epoch), and the seconds it took."""
    count, epoch, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        loader.set_epoch(epoch)
        for batch in loader:
            if batch.ready is not None:  # decoded on the GPU: done once its event is
                batch.ready.synchronize()
            count += len(batch.labels)
            if time.perf_counter() - start >= seconds:
                break
        epoch += 1
    return count, time.perf_counter() - start


def _open_loader(path, gpu: bool):
    """The loader one rank of a trial would read `path` with (train split, else the first), and its decoder."""
    from lbscale.data.formats import open_prepared
    from lbscale.data.loader import ShardedLoader

    file = open_prepared(path)
    split = "train" if file.has_split("train") else file.splits()[0]
    decoder = None
    if file.encoding != "raw":
        from lbscale.data.decoder import JpegDecoder, default_workers

        decoder = JpegDecoder("cuda") if gpu else JpegDecoder("cpu", workers=default_workers())
    return ShardedLoader(file, split, local_batch=min(256, file.size(split)), drop_last=False, decoder=decoder)


def check_data(path, seconds: float = 3.0) -> CheckResult:
    """A prepared file's read rate through lbscale's loader, as one rank reads it, against a stated target."""
    import numpy as np
    import torch

    gpu = torch.cuda.is_available()
    advice = "give a file made by `lbscale prepare` (`lbscale data check FILE` says what is wrong with it)"
    try:
        loader = _open_loader(path, gpu)
    except LbscaleError as e:
        return CheckResult("data", FAILED, str(e), advice)
    except (OSError, ValueError, KeyError, IndexError) as e:
        return CheckResult("data", FAILED, f"{path}: not a prepared file ({_one_line(e)})", advice)
    try:
        count, elapsed = _read_for(loader, seconds)
    finally:
        if loader.encoded:
            loader.decoder.close()
    rate, shape = count / elapsed, tuple(loader.images.shape[1:]) if not loader.encoded else None
    image_bytes = int(np.prod(shape)) * loader.images.dtype.itemsize if shape else None
    speed = f"{rate:,.0f} img/s, " + (f"{rate * image_bytes / 1e6:,.0f} MB/s" if shape else "JPEG to 224 px crops")
    what = f"{path} ({loader.split}, {'x'.join(map(str, shape)) if shape else 'JPEG'}): {speed} over {elapsed:.1f} s"
    if loader.encoded and not gpu:
        return CheckResult("data", OK, f"{what}; not compared (decoded on the CPU, a GPU trial uses nvjpeg)")
    target, source = data_target(image_bytes)
    compared = f"target {target:,} img/s per process ({source})"
    if rate < target:
        return CheckResult("data", FAILED, f"{what}: below the {compared}",
                           "copy the file to node-local disk or /dev/shm, or train with --in-memory")
    return CheckResult("data", OK, f"{what}; {compared}")


# --- the command -------------------------------------------------------------------------------------
def plan_checks(o: DoctorOptions) -> list:
    """(name, check) in the order they run; bad options are an LbscaleError before any check runs."""
    checks = [("torch", check_torch), ("libraries", check_libraries), ("gpus", check_gpus), ("bf16", check_bf16),
              ("compile", check_compile), ("cuda-graph", check_cuda_graph), ("nvjpeg", check_nvjpeg),
              ("allreduce", check_allreduce), ("horovod", check_horovod), ("slurm", check_slurm)]
    if o.systems_file and not o.system:
        raise LbscaleError("--systems FILE: give --system NAME too (the profile to check)")
    if o.system:
        from lbscale.sweep.systems import get_system

        profile = get_system(o.system, o.systems_file)
        checks.append(("system", lambda: check_system(profile)))
    if o.data_path:
        if not Path(o.data_path).exists():  # bad input: before any check takes its seconds
            raise LbscaleError(f"--data {o.data_path}: no such file (give a file made by `lbscale prepare`)")
        checks.append(("data", lambda: check_data(o.data_path, o.data_seconds)))
    if o.json_path and not Path(o.json_path).resolve().parent.is_dir():
        raise LbscaleError(f"--json {o.json_path}: no such directory {Path(o.json_path).parent}")
    return checks


def summary_line(results: list[CheckResult]) -> str:
    """doctor: N checks, a ok, b skipped (why), c failed."""
    count = {s: sum(r.status == s for r in results) for s in (OK, SKIPPED, FAILED)}
    reasons = [r.detail.split(" (")[0] for r in results if r.status == SKIPPED]  # the reason, not its context
    why = ", ".join(f"{reasons.count(w)} {w}" for w in dict.fromkeys(reasons))
    return (f"doctor: {len(results)} checks, {count[OK]} ok, {count[SKIPPED]} skipped" + (f" ({why})" if why else "")
            + f", {count[FAILED]} failed")


def run_doctor(o: DoctorOptions, out=None) -> int:
    """Run the checks, printing each line as it finishes, then the outcome; 1 where a check failed, else 0."""
    out = out or sys.stdout
    results = []
    for name, check in plan_checks(o):
        print(f"{name:<11}", end=" ", file=out, flush=True)  # the name first: some checks take seconds
        try:
            result = check()
        except Exception as e:  # a check that breaks has found something: report it and go on
            result = CheckResult(name, FAILED, _one_line(e), "attach `lbscale doctor --json FILE` to a report")
        results.append(result)
        print(result.line(), file=out, flush=True)
    line = summary_line(results)
    print(line, file=out, flush=True)
    if o.json_path:
        from lbscale.results import write_json

        write_json(Path(o.json_path), {"host": socket.gethostname(), "summary": line,
                                       "checks": [asdict(r) for r in results]})
    return 1 if any(r.status == FAILED for r in results) else 0
