"""The model commands end to end: `ddq models`, training from a prototxt and a solver, `ddq bench grad`."""

import json
import shutil
from pathlib import Path

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
