"""`hf-uq push` and `model.push_to_hub`: one commit holding the weights, config, processor, remote code and card.

The Hub is the only thing replaced here: `huggingface_hub.set_client_factory` hands huggingface_hub an
`httpx2.Client` over an `httpx2.MockTransport` that answers the endpoints a push calls (create repo, create branch,
validate-yaml, preupload, commit) and records every request. That mock transport is the only stand-in: the models,
their `save_pretrained`, the cards and huggingface_hub's own upload code all run for real. The mock answers
"regular" to preupload, so every file's bytes travel inside the recorded commit payload.
"""

from __future__ import annotations

import base64
import json
import re

import httpx2
import pytest
from hub_results import results_document, route, standard_routes, write_results
from huggingface_hub import ModelCard, set_client_factory
from huggingface_hub.repocard_data import model_index_to_eval_results
from huggingface_hub.utils import _http

from hf_uq import TemperatureScaledForImageClassification
from hf_uq.cli import main
from hf_uq.hub.cards import card_metrics, model_card
from hf_uq.hub.remote_code import build_remote_code, remote_code_classes
from hf_uq.models.duo import DuoForImageClassification
from hf_uq.models.duo.image_processing_duo import DuoImageProcessor
from hf_uq.models.tiny import tiny_vit, tiny_vit_image_processor

TOKEN = "hf_test_token"
DUO = "Asymmetric Duo (sidekick s)"


class MockHub:
    """Answers the Hub endpoints of a push and records them; any other request is a 404 naming it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.commits: list[dict] = []
        self.branches: list[tuple[str, str]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        method, path = request.method, request.url.path
        self.requests.append((method, path))
        if (method, path) == ("POST", "/api/repos/create"):
            body = json.loads(request.content)
            repo = f"{body.get('organization') or 'tester'}/{body['name']}"
            return httpx2.Response(200, json={"url": f"https://huggingface.co/{repo}", "name": repo})
        if (method, path) == ("POST", "/api/validate-yaml"):
            return httpx2.Response(200, json={})
        if method == "POST" and (m := re.fullmatch(r"/api/models/(.+)/branch/(.+)", path)):
            self.branches.append((m[1], m[2]))
            return httpx2.Response(200, json={})
        if method == "POST" and re.fullmatch(r"/api/models/(.+)/preupload/(.+)", path):
            files = json.loads(request.content)["files"]
            modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None} for f in files]
            return httpx2.Response(200, json={"files": modes})
        if method == "POST" and (m := re.fullmatch(r"/api/models/(.+)/commit/(.+)", path)):
            lines = [json.loads(line) for line in request.content.splitlines() if line.strip()]
            assert lines[0]["key"] == "header"
            assert all(line["key"] == "file" for line in lines[1:]), lines[1:]
            files = {line["value"]["path"]: base64.b64decode(line["value"]["content"]) for line in lines[1:]}
            self.commits.append({"repo": m[1], "revision": m[2], "header": lines[0]["value"], "files": files,
                                 "auth": request.headers.get("authorization")})
            return httpx2.Response(200, json={"commitUrl": f"https://huggingface.co/{m[1]}/commit/c0ffee",
                                              "commitOid": "c0ffee", "pullRequestUrl": None})
        return httpx2.Response(404, json={"error": f"the mock Hub does not answer {method} {path}"})


@pytest.fixture
def hub():
    """Route huggingface_hub's HTTP through a MockHub; the previous client factory is restored afterwards."""
    previous = _http._GLOBAL_CLIENT_FACTORY
    mock = MockHub()
    set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(mock)))
    try:
        yield mock
    finally:
        set_client_factory(previous)


def _remote_code_files(*objects) -> set[str]:
    modules = {cls.__module__ for obj in objects for cls in remote_code_classes(obj).values()}
    return set(build_remote_code(sorted(modules)).files)


def _readme_metrics(readme: bytes) -> dict[str, dict[str, float]]:
    card = ModelCard(readme.decode("utf-8"))
    name, eval_results = model_index_to_eval_results(card.data.to_dict()["model-index"])
    assert name == card.data.model_name
    return card_metrics(eval_results)


def _expected_metrics(results: dict, route_name: str) -> dict[str, dict[str, float]]:
    entry = next(r for r in results["routes"] if r["name"] == route_name)
    keys = ["accuracy", "ece", "nll", "aurc", "sac", "cp_auroc"]
    test = {k: entry["metrics"]["test"][k][0] for k in keys}
    test |= {f"{o}/auroc": entry["metrics"]["test"][f"{o}/auroc"][0] for o in results["data"]["ood_splits"]}
    return {"test": test, "shift": {k: entry["metrics"]["shift"][k][0] for k in keys}}


@pytest.fixture
def duo_run(tmp_path):
    """A run folder: a saved duo (weights, config, processor, remote code), results.json naming it, two plots."""
    run = tmp_path / "run"
    model_dir = run / "models" / "seed0" / "duo_s"
    large = tiny_vit(hidden_size=32, num_hidden_layers=2, seed=0)
    small = tiny_vit(hidden_size=32, num_hidden_layers=1, seed=1)
    duo = DuoForImageClassification.from_members(large, small, temperatures=(1.3, 2.1))
    processor = DuoImageProcessor.from_members(tiny_vit_image_processor())
    duo.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    document = results_document(standard_routes({"0": "models/seed0/duo_s"}))
    results_path = write_results(run, document, plots=("reliability.png", "risk_coverage.png"))
    return {"dir": model_dir, "results": results_path, "document": document,
            "remote_code": _remote_code_files(duo, processor)}


def test_cli_push_commits_weights_config_processor_remote_code_card_and_plots_in_one_commit(hub, duo_run, capsys):
    model_dir = duo_run["dir"]
    assert main(["card", str(model_dir), "--results", str(duo_run["results"]), "--model-id", "tester/duo"]) == 0
    assert main(["push", str(model_dir), "tester/duo", "--token", TOKEN]) == 0
    assert "https://huggingface.co/tester/duo/commit/c0ffee" in capsys.readouterr().out

    assert len(hub.commits) == 1
    commit = hub.commits[0]
    assert (commit["repo"], commit["revision"], commit["auth"]) == ("tester/duo", "main", f"Bearer {TOKEN}")
    assert {"modeling_duo.py", "configuration_duo.py", "image_processing_duo.py"} <= duo_run["remote_code"]
    assert set(commit["files"]) == {
        "model.safetensors", "config.json", "preprocessor_config.json", "README.md",
        "plots/reliability.png", "plots/risk_coverage.png", *duo_run["remote_code"],
    }
    for name, content in commit["files"].items():
        assert content == (model_dir / name).read_bytes(), name
    assert _readme_metrics(commit["files"]["README.md"]) == _expected_metrics(duo_run["document"], DUO)
    assert [p for m, p in hub.requests if m == "POST"] == [
        "/api/repos/create", "/api/validate-yaml", "/api/models/tester/duo/preupload/main",
        "/api/models/tester/duo/commit/main",
    ]


def test_cli_push_to_a_branch_creates_it(hub, duo_run):
    assert main(["push", str(duo_run["dir"]), "tester/duo", "--token", TOKEN, "--revision", "uq-card",
                 "--private", "--commit-message", "cards"]) == 0
    assert hub.branches == [("tester/duo", "uq-card")]
    (commit,) = hub.commits
    assert commit["revision"] == "uq-card" and commit["header"]["summary"] == "cards"


def test_cli_push_without_a_card_adds_a_minimal_one(hub, duo_run):
    assert not (duo_run["dir"] / "README.md").exists()
    assert main(["push", str(duo_run["dir"]), "tester/duo", "--token", TOKEN]) == 0
    (commit,) = hub.commits
    card = ModelCard(commit["files"]["README.md"].decode())
    assert card.data.eval_results is None and "No evaluation results" in card.text
    assert not (duo_run["dir"] / "README.md").exists()  # the folder itself is left alone


@pytest.mark.parametrize("remove, message", [
    ("model.safetensors", "has no weights"),
    ("config.json", "config.json is missing"),
    ("modeling_duo.py", "missing the remote-code files its auto_map names: modeling_duo.py"),
])
def test_cli_push_refuses_an_incomplete_folder(hub, duo_run, capsys, remove, message, monkeypatch):
    monkeypatch.delenv("HF_UQ_DEBUG", raising=False)
    (duo_run["dir"] / remove).unlink()
    assert main(["push", str(duo_run["dir"]), "tester/duo", "--token", TOKEN]) == 2
    assert message in capsys.readouterr().err
    assert hub.requests == []


def _temperature_model():
    return TemperatureScaledForImageClassification.from_model(
        tiny_vit(hidden_size=32, num_hidden_layers=2), temperature=1.5
    )


def test_push_to_hub_uploads_the_uncertainty_card_it_is_given(hub, tmp_path):
    document = results_document([*standard_routes(), route("temperature scaled", "temperature", fidelity=0.65)])
    results_path = write_results(tmp_path / "run", document, plots=("reliability.png",))
    model = _temperature_model()
    model.uncertainty_card = model_card(results_path, "temperature scaled", model_id="tester/ts")
    commit = model.push_to_hub("tester/ts", token=TOKEN, tags=["digits"])
    assert commit.oid == "c0ffee"

    (pushed,) = hub.commits
    remote = _remote_code_files(model)
    assert "modeling_temperature_scaled.py" in remote
    assert set(pushed["files"]) == {"model.safetensors", "config.json", "README.md", "plots/reliability.png",
                                    *remote}
    assert _readme_metrics(pushed["files"]["README.md"]) == _expected_metrics(document, "temperature scaled")
    card = ModelCard(pushed["files"]["README.md"].decode())
    assert "digits" in card.data.tags and "hf_uq" in card.data.tags
    assert "fidelity below 0.7" in card.text
    assert "digits" not in model.uncertainty_card.data.tags  # the caller's card is not modified
    assert pushed["header"]["summary"] == "Upload TemperatureScaledForImageClassification with its uncertainty card (hf_uq)"


def test_push_to_hub_of_a_loaded_folder_keeps_its_card_plots_and_processor(hub, duo_run):
    model_dir = duo_run["dir"]
    assert main(["card", str(model_dir), "--results", str(duo_run["results"])]) == 0
    duo = DuoForImageClassification.from_pretrained(model_dir)
    duo.push_to_hub("tester/duo-again", token=TOKEN)

    (pushed,) = hub.commits
    assert set(pushed["files"]) == {
        "model.safetensors", "config.json", "preprocessor_config.json", "README.md",
        "plots/reliability.png", "plots/risk_coverage.png", *duo_run["remote_code"],
    }
    assert pushed["files"]["README.md"] == (model_dir / "README.md").read_bytes()
    assert _readme_metrics(pushed["files"]["README.md"]) == _expected_metrics(duo_run["document"], DUO)


def test_push_to_hub_without_results_sends_a_minimal_card(hub, tmp_path):
    model = _temperature_model()
    model.push_to_hub("plain", token=TOKEN, commit_message="first")  # the token's namespace
    (pushed,) = hub.commits
    assert pushed["repo"] == "tester/plain"
    card = ModelCard(pushed["files"]["README.md"].decode())
    assert card.data.eval_results is None
    assert "No evaluation results are attached" in card.text
    assert 'from_pretrained("tester/plain", trust_remote_code=True)' in card.text
    assert pushed["header"]["summary"] == "first"


def test_save_pretrained_with_push_to_hub_goes_through_the_same_single_commit(hub, tmp_path):
    model = _temperature_model()
    model.save_pretrained(tmp_path / "saved", push_to_hub=True, repo_id="tester/saved", token=TOKEN)
    (pushed,) = hub.commits
    assert {"model.safetensors", "config.json", "README.md"} <= set(pushed["files"])
    assert (tmp_path / "saved" / "model.safetensors").is_file()
