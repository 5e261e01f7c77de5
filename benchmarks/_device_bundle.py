"""The wheels the GPU check needs on a device machine and its image lacks, fetched here to be carried there.

A device machine (docs/benchmarks.md, "The GPU check on a device machine") runs Python 3.12 with a CUDA build of
PyTorch, numpy, pytest, matplotlib, pandas and the other packages of DEVICE_PACKAGES, but not Gymnasium, ale-py or
stable-baselines3, and it reaches no package registry. So, here, where pip reaches PyPI:

    python -m benchmarks gpu --bundle          # the wheels into .whl/ (git ignores it), checked to be complete

and there (the device tool's `run`, carrying `.whl`): `bash benchmarks/gpu_on_device.sh 9`, which installs them
into /tmp/site and runs `python -m benchmarks gpu --minutes 9`. The check of completeness: every requirement that a
carried wheel declares, for that Python on Linux x86-64, is carried too or is one of the image's packages.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / ".whl"
DEVICE_PYTHON = "3.12"  # the image's python3: Python 3.12.3 at /opt/torch/.venv/bin/python3
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
# What the check imports that the image lacks; each at the version pyproject.toml pins, else the one given here
CARRIED = {"gymnasium": None, "ale-py": None, "stable-baselines3": None, "farama-notifications": "0.0.6"}
# The image's packages ('cuda', as the device tool's KINDS.md read them on 2026-11-17): carried only for another version
DEVICE_PACKAGES = frozenset(canonicalize_name(name) for name in (
    "absl-py", "accelerate", "aiofiles", "aiohappyeyeballs", "aiohttp", "aiosignal", "annotated-doc", "anyio",
    "attrs", "botorch", "build", "certifi", "charset-normalizer", "chex", "click", "cloudpickle", "cmake",
    "colorama", "contourpy", "coverage", "cuda-bindings", "cuda-core", "cuda-pathfinder", "cuda-toolkit",
    "cupy-cuda13x", "cycler", "cython", "diffrax", "e3nn", "einops", "equinox", "etils", "execnet", "filelock",
    "flatbuffers", "flax", "fonttools", "formulaic", "frozenlist", "fsspec", "gpytorch", "grpcio", "h11", "h5py",
    "hf-xet", "httpcore", "httpx", "huggingface-hub", "humanize", "hypothesis", "idna", "imageio", "iniconfig",
    "interface-meta", "jax", "jax-cuda13-pjrt", "jax-cuda13-plugin", "jaxlib", "jaxtyping", "jinja2", "joblib",
    "kiwisolver", "lazy-loader", "lightning", "lightning-utilities", "linear-operator", "lineax", "llvmlite", "lxml",
    "markdown", "markdown-it-py", "markupsafe", "matplotlib", "mdurl", "meson", "ml-dtypes", "mpi4py", "mpmath",
    "msgpack", "multidict", "multipledispatch", "mypy-extensions", "nanobind", "narwhals", "networkx", "ninja",
    "numba", "numba-cuda", "numpy", "numpyro", "nvidia-cublas", "nvidia-cuda-cupti", "nvidia-cuda-nvrtc",
    "nvidia-cuda-runtime", "nvidia-cudnn-cu13", "nvidia-cufft", "nvidia-cufile", "nvidia-curand", "nvidia-cusolver",
    "nvidia-cusparse", "nvidia-cusparselt-cu13", "nvidia-ml-py", "nvidia-nccl-cu13", "nvidia-nvjitlink",
    "nvidia-nvshmem-cu13", "nvidia-nvtx", "onnx", "onnx-ir", "onnxruntime", "onnxscript", "opencv-python-headless",
    "optax", "opt-einsum", "opt-einsum-fx", "optimistix", "orbax-checkpoint", "packaging", "pandas", "pathspec",
    "patsy", "peft", "pillow", "pip", "pluggy", "portalocker", "prometheus-client", "propcache", "protobuf",
    "psutil", "pyarrow", "pybind11", "py-cpuinfo", "pygments", "pyparsing", "pyproject-hooks", "pyre-extensions",
    "pytest", "pytest-benchmark", "pytest-cov", "pytest-mock", "pytest-timeout", "pytest-xdist", "python-dateutil",
    "pytorch-lightning", "pyyaml", "regex", "requests", "rich", "sacrebleu", "safetensors", "scikit-build-core",
    "scikit-image", "scikit-learn", "scipy", "seaborn", "sentencepiece", "sentence-transformers", "setuptools",
    "shellingham", "simplejson", "six", "sortedcontainers", "statsmodels", "sympy", "tabulate", "tensorboard",
    "tensorboard-data-server", "tensorstore", "threadpoolctl", "tifffile", "tiktoken", "timm", "tokenizers", "toolz",
    "torch", "torchaudio", "torchdiffeq", "torch-geometric", "torchmetrics", "torchvision", "tqdm", "transformers",
    "treescope", "triton", "typer", "typing-extensions", "typing-inspect", "urllib3", "uvloop", "wadler-lindig",
    "werkzeug", "wheel", "wrapt", "xarray", "xxhash", "yarl", "zipp",
))


class BundleError(Exception):
    pass


def pinned_versions() -> dict[str, str]:
    """`name==version` pins of pyproject.toml's dependencies and optional dependencies, by canonical name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for line in [*project["dependencies"], *(d for group in project["optional-dependencies"].values() for d in group)]:
        requirement = Requirement(line)
        exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        if exact:
            pins[canonicalize_name(requirement.name)] = exact[0]
    return pins


def carried_requirements() -> list[str]:
    pins = pinned_versions()
    missing = [name for name, version in CARRIED.items() if not (version or pins.get(canonicalize_name(name)))]
    if missing:
        raise BundleError(f"no version for {', '.join(missing)}: pin it in pyproject.toml or in CARRIED")
    return [f"{name}=={version or pins[canonicalize_name(name)]}" for name, version in CARRIED.items()]


def requirements_of(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        headers = Parser().parsestr(archive.read(metadata).decode())
    return [Requirement(line) for line in headers.get_all("Requires-Dist") or []]


def project_of(wheel: Path) -> str:
    return canonicalize_name(wheel.name.split("-")[0])


def unmet(wheels: list[Path], python_version: str) -> dict[str, list[str]]:
    """Requirements of the wheels (no extras asked for) on that Python on Linux x86-64 that neither the wheels nor
    the image provide: {wheel's project: [requirement, ...]}."""
    environment = {**default_environment(), "python_version": python_version, "python_full_version":
                   f"{python_version}.0", "sys_platform": "linux", "platform_system": "Linux",
                   "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython", "extra": ""}
    provided = DEVICE_PACKAGES | {project_of(wheel) for wheel in wheels}
    missing = {}
    for wheel in wheels:
        for requirement in requirements_of(wheel):
            if requirement.marker and not requirement.marker.evaluate(environment):
                continue
            if canonicalize_name(requirement.name) not in provided:
                missing.setdefault(project_of(wheel), []).append(str(requirement))
    return missing


def download(folder: Path = FOLDER, python_version: str = DEVICE_PYTHON) -> list[Path]:
    """The carried wheels for that Python into `folder`, whose other wheels go (two versions of one project there
    would stop the install); raises BundleError if pip fails or a requirement would be left unmet."""
    folder.mkdir(exist_ok=True)
    requirements = carried_requirements()
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", python_version, "--implementation", "cp",
               *(option for platform in PLATFORMS for option in ("--platform", platform)),
               "--dest", str(folder), *requirements]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise BundleError(f"pip download failed ({done.returncode}):\n{done.stderr[-3000:]}")
    wanted = {canonicalize_name(r.split("==")[0]): r.split("==")[1] for r in requirements}
    wheels = []
    for wheel in sorted(folder.glob("*.whl")):
        name, version = project_of(wheel), wheel.name.split("-")[1]
        if wanted.get(name) == version:
            wheels.append(wheel)
        else:
            wheel.unlink()
    missing = unmet(wheels, python_version)
    if missing:
        raise BundleError("requirements neither carried nor on the device image: " + "; ".join(
            f"{project} needs {', '.join(needs)}" for project, needs in missing.items()))
    return wheels


def main(python_version: str = DEVICE_PYTHON) -> None:
    try:
        wheels = download(FOLDER, python_version)
    except BundleError as error:
        print(f"the GPU check's wheels: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    size = sum(wheel.stat().st_size for wheel in wheels) / 2**20
    relative = FOLDER.relative_to(ROOT)
    print(f"{len(wheels)} wheels for Python {python_version} in {relative}/ ({size:.1f} MiB), nothing else needed:")
    print("\n".join(f"  {wheel.name}" for wheel in wheels))
    print(f'On the device machine: run(command="bash benchmarks/gpu_on_device.sh 9", carry=["{relative}"], '
          'timeout_s=600)')
