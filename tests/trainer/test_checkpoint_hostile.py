"""Hostile checkpoints: zip bombs, lying zip headers, JSON nested without end, layers the weights do not fit,
huge declared layers and spaces, env ids that name modules. Each is refused with a CheckpointError or
ConfigError before anything big is allocated, and `python -m trainer eval` answers it without a traceback."""

import json
import os
import re
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save as save_tensors

import trainer
from trainer.checkpoint import CheckpointError, read_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(learning_starts=50, batch_size=16, buffer_size=1000, hidden_layers="32,32")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    agent = trainer.make("dqn", "CartPole-v1", seed=0, **TINY)
    return agent.save(tmp_path_factory.mktemp("hostile") / "good.zip")


def members(path) -> tuple[dict, bytes]:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json")), archive.read("model.safetensors")


def write_checkpoint(path, config, model: bytes) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", config if isinstance(config, (str, bytes)) else json.dumps(config))
        archive.writestr("model.safetensors", model)
    return path


def run_eval(path, cwd, limit_memory=True) -> subprocess.CompletedProcess:
    """`python -m trainer eval path` in a fresh interpreter that prints its peak memory (KiB) last."""
    code = ("import resource, sys\nfrom trainer.cli import main\ncode = main(['eval', sys.argv[1], '--episodes', '1'])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(code)\n")
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("RLWEB_ENV_MODULES", None)
    return subprocess.run([sys.executable, "-c", code, str(path)], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=300)


def zip_bomb(path: Path, config: dict, size: int = 2 * 2**30) -> Path:
    """A checkpoint whose model.safetensors inflates to `size` zero bytes (about 2 MB on disk). Its deflate stream is
    one MiB of zeros compressed and fully flushed (which forgets the window, so every MiB gives the same bytes),
    repeated: compressing the 2 GiB took a minute and a half of a busy CI."""
    chunk, pieces = bytes(2**20), size // 2**20
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(pieces):
        crc = zlib.crc32(chunk, crc)
    model = (zipfile.ZIP_DEFLATED, crc, size, piece * pieces + compressor.flush())
    config_json = json.dumps(config).encode()
    path.write_bytes(zip_of({"config.json": (zipfile.ZIP_STORED, zlib.crc32(config_json), len(config_json),
                                             config_json), "model.safetensors": model}))
    return path


def zip_of(members: dict[str, tuple[int, int, int, bytes]]) -> bytes:
    """A zip archive of members given as (method, CRC-32, size, stored bytes), headers written by hand (APPNOTE 4.3)."""
    archive, directory = bytearray(), bytearray()
    for name, (method, crc, size, stored) in members.items():
        encoded, offset = name.encode(), len(archive)
        fields = (method, 0, 0x21, crc, len(stored), size, len(encoded))  # 0x21: 1980-01-01, 00:00
        archive += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, *fields, 0) + encoded + stored
        directory += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, *fields, 0, 0, 0, 0, 0, offset) + encoded
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(directory), len(archive), 0)
    return bytes(archive + directory + end)


@pytest.mark.slow
def test_a_zip_bomb_is_refused_in_bounded_memory(checkpoint, tmp_path, capsys):
    config, _ = members(checkpoint)
    bomb = zip_bomb(tmp_path / "bomb.zip", config)
    assert bomb.stat().st_size < 3 * 2**20
    with zipfile.ZipFile(bomb) as archive:  # a valid archive that inflates as it says
        assert archive.getinfo("model.safetensors").file_size == 2**31
        with archive.open("model.safetensors") as member:
            assert member.read(3 * 2**20) == bytes(3 * 2**20)
        assert json.loads(archive.read("config.json")) == config
    result = run_eval(bomb, tmp_path)
    assert result.returncode == 2, result.stderr
    assert "model.safetensors declares 2,147,483,648 bytes" in result.stderr and "Traceback" not in result.stderr
    peak = int(result.stderr.strip().splitlines()[-1]) * 1024
    with capsys.disabled():
        print(f"\nzip bomb ({bomb.stat().st_size:,} bytes, inflating to 2 GiB): peak memory {peak / 2**20:.0f} MiB")
    assert peak < 1 * 2**30


def understated(path: Path, config: dict, size: int, claimed: int) -> Path:
    """A checkpoint whose model.safetensors (`size` zero bytes) claims in both zip headers to be `claimed`."""
    write_checkpoint(path, config, bytes(size))
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("model.safetensors")
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, info.header_offset + 22, claimed)  # the local header's uncompressed size
    end = data.rindex(b"PK\x05\x06")  # the end of central directory record says where the directory starts
    central = struct.unpack_from("<I", data, end + 16)[0]
    while data[central + 46:central + 46 + struct.unpack_from("<H", data, central + 28)[0]] != b"model.safetensors":
        central += 46 + sum(struct.unpack_from("<HHH", data, central + 28))
    struct.pack_into("<I", data, central + 24, claimed)  # the central directory's uncompressed size
    path.write_bytes(bytes(data))
    return path


def test_a_member_that_inflates_past_its_declared_size_is_refused(checkpoint, tmp_path):
    config, _ = members(checkpoint)
    lying = understated(tmp_path / "lying.zip", config, size=64 * 2**20, claimed=4096)
    with zipfile.ZipFile(lying) as archive:
        assert archive.getinfo("model.safetensors").file_size == 4096
    with pytest.raises(CheckpointError, match="model.safetensors"):
        trainer.load(lying)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        read_checkpoint(lying)


def test_a_model_bigger_than_its_config_needs_is_refused_before_it_is_read(checkpoint, tmp_path):
    config, model = members(checkpoint)
    padded = write_checkpoint(tmp_path / "padded.zip", config, model + bytes(8 * 2**20))
    with pytest.raises(CheckpointError, match=r"declares 8,[0-9,]+ bytes, more than the [0-9,]+ that this checkpoint"):
        trainer.load(padded)


@pytest.mark.parametrize("member", ["config.json", "model.safetensors"])
def test_json_nested_without_end_is_a_clear_error(checkpoint, tmp_path, member):
    config, model = members(checkpoint)
    deep = "[" * 100_000 + "]" * 100_000
    if member == "config.json":
        path = write_checkpoint(tmp_path / "deep.zip", deep, model)
    else:
        header = deep.encode()
        path = write_checkpoint(tmp_path / "deep.zip", config, struct.pack("<Q", len(header)) + header)
    with pytest.raises(CheckpointError, match="nested too deeply"):
        trainer.load(path)
    result = run_eval(path, tmp_path)
    assert result.returncode == 2 and "nested too deeply" in result.stderr and "Traceback" not in result.stderr


def test_json_deeper_than_a_checkpoint_needs_is_refused_even_where_python_could_parse_it(checkpoint, tmp_path):
    config, model = members(checkpoint)
    config["extra_state"] = {"statistics": json.loads("[" * 900 + "]" * 900)}
    with pytest.raises(CheckpointError, match="nested too deeply"):
        trainer.load(write_checkpoint(tmp_path / "deep.zip", config, model))


def test_hidden_layers_that_do_not_fit_the_weights_get_a_clear_message(checkpoint, tmp_path):
    config, model = members(checkpoint)
    config["hyperparameters"]["hidden_layers"] = "64"
    path = write_checkpoint(tmp_path / "mismatch.zip", config, model)
    with pytest.raises(CheckpointError) as error:
        trainer.load(path)
    message = str(error.value)
    assert message.startswith("the weights do not fit the network that hidden_layers='64' describes")
    assert re.search(r"q_network\.body\.0\.(weight|bias) is \[32(, 4)?\] in the file, the network needs \[64(, 4)?\]",
                     message)
    assert "size mismatch" not in message


def test_a_tiny_checkpoint_declaring_huge_layers_is_refused_before_they_are_allocated(checkpoint, tmp_path):
    config, _ = members(checkpoint)
    config["hyperparameters"]["hidden_layers"] = "65536,65536"
    config.pop("optimizers")
    path = write_checkpoint(tmp_path / "huge.zip", config, save_tensors({"q_network.w": torch.zeros(1)}))
    assert path.stat().st_size < 2000
    with pytest.raises(trainer.ConfigError, match="this run would need about [0-9.]+ GiB") as error:
        trainer.load(path)
    assert set(error.value.errors) == {"hidden_layers"}
    result = run_eval(path, tmp_path)
    assert result.returncode == 2 and "hidden_layers: this run would need" in result.stderr
    assert int(result.stderr.strip().splitlines()[-1]) * 1024 < 1 * 2**30


def test_weights_declared_far_bigger_than_the_network_are_refused_from_the_header(checkpoint, tmp_path):
    config, model = members(checkpoint)
    header = json.dumps({"q_network.body.0.weight": {"dtype": "F32", "shape": [65536, 65536],
                                                       "data_offsets": [0, 4 * 65536 * 65536]}}).encode()
    path = write_checkpoint(tmp_path / "declared.zip", config, struct.pack("<Q", len(header)) + header)
    with pytest.raises(CheckpointError, match=r"\[65536, 65536\] in the file, the network needs \[32, 4\]"):
        trainer.load(path)


@pytest.mark.parametrize("edit, error, message", [
    (lambda c: c.update(algorithm="no-such-algorithm"), trainer.ConfigError, "Unknown algorithm"),
    (lambda c: c.update(algorithm=["dqn"]), CheckpointError, "bad field: algorithm"),
    (lambda c: c.update(env_id=7), CheckpointError, "bad field: env_id"),
    (lambda c: c.update(seed=2**70), CheckpointError, "seed must be"),
    (lambda c: c.update(step="later"), CheckpointError, "bad field: step"),
    (lambda c: c.update(format_version=99), CheckpointError, "not one this rlweb reads"),
    (lambda c: c["observation_space"].update(type="Graph"), CheckpointError, "unsupported space"),
    (lambda c: c["observation_space"].update(shape=[65536, 65536]), CheckpointError, "holds more than"),
    (lambda c: c["observation_space"].update(dtype="object"), CheckpointError, "unsupported dtype"),
    (lambda c: c.update(action_space={"type": "Discrete", "n": 10**30}), CheckpointError, "Discrete needs"),
    (lambda c: c.update(action_space={"type": "Box", "shape": [1], "dtype": "float32", "low": [-1], "high": [1]}),
     trainer.ConfigError, "needs Discrete actions"),
    (lambda c: c["hyperparameters"].update(gamma=float("nan")), trainer.ConfigError, "gamma"),
    (lambda c: c["hyperparameters"].update(no_such_thing=1), trainer.ConfigError, "unknown hyperparameter"),
    (lambda c: c.update(optimizers={"optimizer": "lots"}), CheckpointError, "optimizer state does not fit"),
    (lambda c: c.update(env_id="this:CartPole-v1"), trainer.ConfigError, "RLWEB_ENV_MODULES"),
])
def test_bad_config_fields_are_clear_errors(checkpoint, tmp_path, edit, error, message):
    config, model = members(checkpoint)
    edit(config)
    with pytest.raises(error, match=message):
        trainer.load(write_checkpoint(tmp_path / "bad.zip", config, model))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                                        max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["algorithm", "env_id", "hyperparameters", "observation_space", "action_space", "seed",
                              "step", "extra_state", "optimizers", "best_eval_return", "seconds_trained",
                              "format_version"]), value=JSON)
def test_any_json_in_any_config_field_loads_or_is_a_clear_error(checkpoint, tmp_path, field, value):
    config, model = members(checkpoint)
    config[field] = value
    path = write_checkpoint(tmp_path / "fuzzed.zip", config, model)
    try:
        trainer.load(path)
    except (CheckpointError, trainer.ConfigError):
        pass


def test_evaluating_a_checkpoint_whose_env_id_names_a_module_imports_nothing(checkpoint, tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "pwnmod.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    config, model = members(checkpoint)
    config["env_id"] = "pwnmod:CartPole-v1"
    path = write_checkpoint(tmp_path / "pwn.zip", config, model)
    result = run_eval(path, tmp_path)  # the current folder, which holds pwnmod.py, is on the import path
    assert result.returncode == 2, result.stderr
    assert "env_id: 'pwnmod:CartPole-v1' names a Python module" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


def test_a_zip_of_many_files_is_refused(checkpoint, tmp_path):
    config, model = members(checkpoint)
    path = write_checkpoint(tmp_path / "many.zip", config, model)
    with zipfile.ZipFile(path, "a") as archive:
        for index in range(20):
            archive.writestr(f"extra/{index}", b"")
    with pytest.raises(CheckpointError, match="not 22 files"):
        trainer.load(path)
