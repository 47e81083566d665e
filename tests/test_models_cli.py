"""The model commands end to end: `ddq models`, training from a prototxt and a solver, `ddq bench grad`."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import run_ddq, summary_of

DATA = Path(__file__).parent / "data"


def test_models_lists_shipped_definitions_and_shows_a_train_net():
    listing = run_ddq("models")
    assert listing.returncode == 0 and "deepq16" in listing.stdout and "nature84" in listing.stdout
    shown = run_ddq("models", str(DATA / "dqn_train_v1.prototxt"))
    assert shown.returncode == 0, shown.stderr
    assert "228,132 parameters" in shown.stdout and "target-network  Pconv1" in shown.stdout


def test_train_from_a_prototxt_and_a_solver_then_evaluate_elsewhere(tmp_path):
    model = tmp_path / "mlp.prototxt"
    shutil.copy(Path(__file__).parents[1] / "models" / "mlp-cartpole.prototxt", model)
    run_dir = tmp_path / "run"
    result = run_ddq("train", "--mode", "serial", "--env", "CartPole-v1", "--model", str(model), "--solver",
                     str(DATA / "solver_rmsprop.prototxt"), "--total-steps", "1500", "--learning-starts", "500",
                     "--eval-every", "1000", "--eval-episodes", "2", "--no-progress", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert summary_of(run_dir)["updates"] > 0
    saved = torch.load(run_dir / "checkpoint.pt")
    config = saved["settings"]["config"]["agent"]
    assert config["optim"]["optimizer"] == "rmsprop" and config["optim"]["lr"] == 0.00025
    assert config["max_grad_norm"] == 10.0
    assert set(saved["learner"]["optimizer"]["state"]) == {"square_avg"}
    model.unlink()  # the checkpoint carries the definition, so evaluation needs no file
    evaluated = run_ddq("evaluate", str(run_dir), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    assert len(json.loads(evaluated.stdout)["returns"]) == 2


def test_a_model_that_does_not_fit_the_env_is_a_clear_error(tmp_path):
    result = run_ddq("train", "--mode", "serial", "--env", "CartPole-v1", "--model", "deepq16", "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "deepq16.prototxt takes states of shape (4, 16, 16)" in result.stderr
    bad = tmp_path / "bad.prototxt"
    bad.write_text('layer { name: "in" type: "Input" top: "in" input_param { shape { dim: 1 dim: 4 } } }\n'
                   'layer { name: "odd" type: "Deconvolution" bottom: "in" top: "odd" }\n')
    result = run_ddq("train", "--mode", "serial", "--env", "CartPole-v1", "--model", str(bad), "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 2 and f"{bad}:2: layer 'odd' has type Deconvolution" in result.stderr


def test_bench_grad_prints_ours_beside_the_original():
    result = run_ddq("bench", "grad", "--sizes", "16", "24", "--repeats", "2")
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in result.stdout.splitlines() if line.startswith(("| 16x16", "| 24x24", "| MLP"))}
    assert rows["16x16"][1] == "228,132" and rows["16x16"][2] == "0.91" and rows["16x16"][10] == "81.6"
    assert rows["24x24"][1] == "391,972" and rows["24x24"][10] == "160.4"
    assert rows["MLP 4-256-256-2"][1] == "67,586" and rows["MLP 4-256-256-2"][10] == "—"  # no original figure
    for row in rows.values():
        assert float(row[5]) > 0 and float(row[6]) > 0 and row[7].endswith("%")


# ------------------------------------------------------------------ malformed definitions (issue 40, defect 8)
INPUT = 'layer { name: "state" type: "Input" top: "state" input_param { shape { dim: 1 dim: 4 } } }\n'


def _fc(name: str, bottom: str, settings: str) -> str:
    return f'layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" top: "{name}"\n' \
           f'  inner_product_param {{ {settings} }} }}\n'


MALFORMED = {  # name: (definition, where it is refused, what the line says)
    "deep": ("a {\n" * 2000 + "}\n" * 2000, ":65: ", "messages nested more than 64 deep"),
    "no-outputs": (INPUT + _fc("fc1", "state", ""), ":2: ", "layer 'fc1' needs num_output"),
    "stride-0": (INPUT.replace("dim: 4", "dim: 1 dim: 12 dim: 12")
                 + 'layer { name: "c" type: "Convolution" bottom: "state" top: "c"\n'
                   '  convolution_param { num_output: 8 kernel_size: 3 stride: 0 } }\n'
                 + _fc("q", "c", "num_output: 4"), ":3: ", "layer 'c': stride: 0 is not allowed"),
    "wide": (INPUT + _fc("fc1", "state", "num_output: 2000000000") + _fc("q", "fc1", "num_output: 2"),
             ":2: ", "layer 'fc1' outputs 2,000,000,000 values a state"),
    "too-many-parameters": (INPUT + _fc("fc1", "state", "num_output: 4000000") + _fc("fc2", "fc1", "num_output: 4000")
                            + _fc("q", "fc2", "num_output: 2"), ":4: ",
                            "layer 'fc2' has 16,000,004,000 parameters, 16,020,004,000 with the layers before it; "
                            "ddq builds networks of at most 100,000,000"),
}
ENVS = {"stride-0": "ddq/Snake-v0"}  # a convolution needs image states: Snake's 12x12 board


def _one_line(result) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr and result.stdout == ""
    assert not any(kind in result.stderr for kind in ("RecursionError", "TypeError", "ZeroDivisionError",
                                                      "allocate", "--debug"))
    return result.stderr


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_definition_is_one_line_naming_file_and_line(name, tmp_path):
    text, line, words = MALFORMED[name]
    model = tmp_path / f"{name}.prototxt"
    model.write_text(text)
    result = run_ddq("train", "--mode", "serial", "--env", ENVS.get(name, "CartPole-v1"), "--model", str(model),
                     "--run-dir", str(tmp_path / "run"), env={"DDQ_REDIS_URL": ""})
    assert f"ddq: error: --model '{model}': {model}{line}{words}" in _one_line(result)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", MALFORMED)
def test_a_checkpoint_embedding_a_malformed_definition_is_refused_in_one_line(name, tmp_path):
    from ddq.config import TrainConfig, settings_document

    config = TrainConfig()
    config.agent.env, config.agent.model = ENVS.get(name, "CartPole-v1"), f"/elsewhere/{name}.prototxt"
    text, line, words = MALFORMED[name]
    torch.save({"format": "ddq-checkpoint-1", "settings": settings_document(config), "q_network": {},
                "model_definition": text}, tmp_path / "checkpoint.pt")
    result = run_ddq("evaluate", str(tmp_path), "--episodes", "1")
    where = f"{tmp_path}, model /elsewhere/{name}.prototxt as kept there{line}"
    assert f"ddq: error: {where}{words}" in _one_line(result)
