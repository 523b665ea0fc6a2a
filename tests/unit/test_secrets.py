"""What counts as a secret: by name (snake and camel case) and by well-known token shape;
ordinary names and values are left alone."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.capture.secrets import (
    URL_PASSWORD,
    EnvSecrets,
    env_name,
    find_in_bytes,
    find_in_source,
    find_in_value,
    is_secret_name,
)

# built at run time so this file itself holds no token-shaped literal
HF = "hf_" + "Zq8" * 12
SHAPES = {
    "a Hugging Face token": HF,
    "an OpenAI-style API key": "sk-" + "proj-" + "a1B2" * 8,
    "a GitHub token": "ghp_" + "x9Y" * 12,
    "a GitHub token ": "github_" + "pat_" + "11ABC" * 6,
    "an AWS access key id": "AKIA" + "QWERTYUIOPASDFGH",
    "a Slack token": "xoxb" + "-123456789012-abcdefABCDEF",
    "a JSON Web Token": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NSJ9" + ".c2lnbmF0dXJlLXBhcnQ",
    "a PEM private key": "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIE...",
}


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "hfToken", "db_password", "PASSWD", "AWS_SECRET_ACCESS_KEY", "apiKey",
     "OPENAI_API_KEY", "private_key", "gcp_credentials", "Credential", "clientSecret"],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["tokenizer", "MAX_TOKENS", "key_dim", "vocab", "num_tokens", "keys", "api_url",
     "access_log", "monkey", "passage", "secretary_count", "TOKEN_TYPE", "SECRET_NAME",
     "token_file", "passwordHint", "API_KEY_ENV", "image_token_id", "pad_token_id", "n_token",
     "API_KEY_ID"],
)  # fmt: skip
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_token_shapes_are_found_under_any_name(kind: str) -> None:
    found = find_in_value("data", {"nested": [("x", SHAPES[kind])]})
    assert found is not None
    assert found.kind.startswith(kind.strip())
    assert found.where == "data['nested'][0][1]"


@dataclass
class Settings:
    model: str = "gpt2"
    hf_token: str = ""


def test_found_by_name_in_a_dict_a_dataclass_and_a_list() -> None:
    assert find_in_value("CONFIG", {"lr": 0.1, "dbPassword": "hunter22"}).where == (  # type: ignore[union-attr]
        "CONFIG['dbPassword']"
    )
    assert find_in_value("S", Settings(hf_token="abcdef123")).where == "S.hf_token"  # type: ignore[union-attr]
    assert find_in_value("PASSWORD_LIST", ["p4ssw0rd!"]) is not None
    assert env_name("hfToken") == "HF_TOKEN"


@pytest.mark.parametrize(
    "value",
    [
        {"tokenizer": "bert-base-uncased", "MAX_TOKENS": 512, "key_dim": 64},
        {"vocab": ["a", "b"], "path": "/data/train.txt", "model_id": "meta-llama/Llama-2-7b-hf"},
        {"pad_token": "<pad>", "cls_token": "[CLS]", "token_env": "HF_TOKEN"},
        {"token_file": "/var/run/secrets/token", "hf_token": "", "eos_token": "</s>"},
        {"PASSWORD_HINT": "ask the admin", "token_ids": [1, 2, 3]},
        {"token_type": "bearer", "secret_name": "hf-token", "SECRET_KEY_NAME": "token"},
    ],
)
def test_no_false_alarm_on_ordinary_values(value: dict[str, object]) -> None:
    assert find_in_value("CFG", value) is None


def test_found_in_source_defaults_keywords_dicts_and_assignments() -> None:
    assert find_in_source("def train(token='abcdef12'):\n    pass\n", "train").where == (  # type: ignore[union-attr]
        "default of token (line 1)"
    )
    assert find_in_source("login(api_key='zzzz9999')\n", "c").name == "api_key"  # type: ignore[union-attr]
    assert find_in_source("x = {'password': 'pw-12345'}\n", "c") is not None
    assert find_in_source(f"def f():\n    return {HF!r}\n", "f").where == "line 2"  # type: ignore[union-attr]
    ordinary = (
        "import os\nMAX_TOKENS = 512\ntokenizer = load('bert-base-uncased')\n"
        "token = os.environ['HF_TOKEN']\npad_token = '<pad>'\n"
        "def train(model_id='meta-llama/Llama-2-7b-hf', path='/data/x'):\n    pass\n"
    )
    assert find_in_source(ordinary, "c") is None


def test_env_flag_with_a_secret_value_is_refused_and_a_bare_name_is_local_only() -> None:
    from jupyter_ktrain import SpecError
    from jupyter_ktrain.flags import parse_flags, spec_from_args

    with pytest.raises(SpecError, match="--secret-env HF_TOKEN=hf-token/token"):
        spec_from_args(parse_flags(f"--backend local --env HF_TOKEN={HF}"))
    with pytest.raises(SpecError, match="local backend only"):
        spec_from_args(parse_flags("--backend kubernetes --env HF_TOKEN"))
    spec = spec_from_args(
        parse_flags(f"--backend local --env HF_TOKEN={HF} --allow-secret HF_TOKEN")
    )
    assert spec.env == (("HF_TOKEN", HF),)
    spec = spec_from_args(
        parse_flags("--backend local --env HF_TOKEN --env TOKENIZERS_PARALLELISM=false")
    )
    assert (spec.pass_env, spec.env) == (("HF_TOKEN",), (("TOKENIZERS_PARALLELISM", "false"),))


def test_allow_secret_ships_it_and_says_what_that_means() -> None:
    from jupyter_ktrain import SecretError
    from jupyter_ktrain.capture import capture

    ns = {"HF_TOKEN": HF, "train": None}
    history = ["", f"HF_TOKEN = {HF!r}"]
    with pytest.raises(SecretError) as info:
        capture("n = len(HF_TOKEN)", ns, history)
    assert info.value.name == "HF_TOKEN"
    assert "'HF_TOKEN' (cell [1]) is a secret (a Hugging Face token, by its value)" in str(
        info.value
    )
    program = capture("n = len(HF_TOKEN)", ns, history, allow_secrets=["HF_TOKEN"])
    assert HF in program.source
    (warning,) = program.warnings
    assert "--allow-secret HF_TOKEN" in warning
    assert "can read it" in warning
    from_env = capture("n = len(HF_TOKEN)", ns, history, from_env=["HF_TOKEN"])
    assert HF not in from_env.source
    assert "HF_TOKEN = __import__('os').environ['HF_TOKEN']" in from_env.source


# -- by value: the kernel's environment, constant expressions, detect-secrets -----------------

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documented example secret key
SERVICE_CRED = "svc-" + "7Hq2LmZx" * 2  # built at run time: a value of no known shape
PROXY_KEY = "proxy key " + "4f8a" * 3  # OPENAI_API_KEY's value for a proxy: no "sk-", a space
ENVIRON = {
    "MY_SERVICE_CRED": SERVICE_CRED,
    "OPENAI_API_KEY": PROXY_KEY,
    "AUTH_ENABLED": "true",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    "PWD": "/home/user/work",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "HOME": "/home/user",
}


def test_a_value_from_a_secret_environment_variable_is_found_under_any_name() -> None:
    env = EnvSecrets(ENVIRON)
    found = find_in_value("settings", {"endpoint": "https://x", "auth": [SERVICE_CRED]}, env)
    assert found is not None
    assert found.where == "settings['auth'][0]"
    assert found.kind == "the value of the kernel's environment variable MY_SERVICE_CRED"
    assert found.env == "MY_SERVICE_CRED"  # the fix names the variable it came from
    assert find_in_value("OPENAI_API_KEY", PROXY_KEY, env).env == "OPENAI_API_KEY"  # type: ignore[union-attr]
    header = find_in_value("headers", {"X-Api": f"Bearer {SERVICE_CRED}"}, env)
    assert header is not None  # a long secret inside a longer string
    # variables that only look like secrets by name: a flag, a path, a number
    for ordinary in ("true", "1", "/home/user/work", "/tmp/ssh-agent.sock", "/home/user"):
        assert find_in_value("x", {"v": ordinary}, env) is None, ordinary
    source = f"def train(key={SERVICE_CRED!r}):\n    pass\n"
    assert find_in_source(source, "train", env).env == "MY_SERVICE_CRED"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("source", "where"),
    [
        ("KEY = 'sk-proj-' + 'Q' * 40\n", "KEY (line 1)"),
        ("def f(k='sk-' + 'proj-' + 40 * 'Q'):\n    pass\n", "default of k (line 1)"),
        ("call(f\"{'sk-proj-'}{'Q' * 40}\")\n", "line 1"),
        ("KEY = ('sk-proj-'\n       + 'Q' * 40)\n", "KEY (line 1)"),
    ],
)
def test_a_constant_expression_is_scanned_as_the_string_it_makes(source: str, where: str) -> None:
    found = find_in_source(source, "c", EnvSecrets({}))
    assert found is not None
    assert (found.where, found.kind) == (where, "an OpenAI-style API key, by its value")


def test_a_huge_constant_expression_is_not_built() -> None:
    assert find_in_source("PAD = 'Q' * 10**12\nX = 'a' * 10_000_000\n", "c", EnvSecrets({})) is None


@pytest.mark.parametrize("name", ["key", "x", "value", "s"])
def test_a_random_token_is_found_by_its_entropy_under_a_generic_name(name: str) -> None:
    env = EnvSecrets({})
    found = find_in_source(f"def f({name}={AWS_SECRET!r}):\n    pass\n", "f", env)
    assert found is not None
    assert found.kind == "a random-looking token, by its entropy"
    assert find_in_value("CFG", {name: AWS_SECRET}, env) is not None


def test_credentials_detect_secrets_knows_are_found() -> None:
    env = EnvSecrets({})
    stripe = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    found = find_in_value("DB", "postgresql://alice:hunter22@db.internal:5432/x", env)
    assert found is not None
    assert found.kind == f"{URL_PASSWORD}, by its value"
    assert "'Stripe Access Key'" in find_in_value("cfg", {"x": stripe}, env).kind  # type: ignore[union-attr]


def test_new_secret_words_pw_creds_auth_and_keyword_detector_pairs() -> None:
    env = EnvSecrets({})
    assert find_in_value("creds", {"pw": "hunter2-Secret!"}, env).where == "creds['pw']"  # type: ignore[union-attr]
    for name in ("pwd", "db_pass", "client_key", "authKey", "service_account_key", "CREDS"):
        assert is_secret_name(name), name
    for name in ("auth_method", "auth_backend", "auth_host", "model_id", "checksum"):
        assert not is_secret_name(name), name


URL_WITH_PASSWORD = "https://svc:" + "Pa55word" + "@data.internal/train.tar"


@pytest.mark.parametrize(
    ("source", "where"),
    [
        (f"DATA_URL = {URL_WITH_PASSWORD!r}\n", "DATA_URL (line 1)"),
        (f"def train(url={URL_WITH_PASSWORD!r}):\n    pass\n", "default of url (line 1)"),
        ("def train(user):\n    return f'https://{user}:Pa55word@data.internal/t'\n", "line 2"),
        ("def train(user):\n    return 'https://' + user + ':Pa55word@host/t'\n", "line 2"),
    ],
)
def test_a_password_written_in_a_url_is_a_secret(source: str, where: str) -> None:
    found = find_in_source(source, "c", EnvSecrets({}))
    assert found is not None
    assert (found.where, found.kind.startswith(URL_PASSWORD)) == (where, True)


def test_a_url_secret_travels_whole_under_its_own_name_and_placeholders_are_no_secret() -> None:
    env = EnvSecrets({})
    found = find_in_value("DATA_URL", URL_WITH_PASSWORD, env)
    assert found is not None
    assert found.env == "DATA_URL"
    assert find_in_bytes(b"\x80\x04" + URL_WITH_PASSWORD.encode() + b"\x94.") == URL_PASSWORD
    for ordinary in (
        "def train(pw):\n    return f'https://svc:{pw}@data.internal/t'\n",
        "URL = 'https://svc:$PASSWORD@data.internal/t'\n",
        "URL = 'https://svc:<password>@data.internal/t'\n",
        "URL = 'https://data.internal:8443/train.tar'\n",
        "REPO = 'ssh://git@git.internal:22/team/x.git'\n",
        "MAIL = 'mailto:someone@example.org'\n",
    ):
        assert find_in_source(ordinary, "c", env) is None, ordinary


ORDINARY_TRAINING = {
    "model": "bert-base-uncased",
    "hub": "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2",
    "quantized": "TheBloke/Llama-2-13B-chat-GPTQ",
    "log_dir": "runs/Jun01_12-30-45_MyHostName-GPU0",
    "log_dir2": "runs/Dec31_23-59-59_DESKTOP-7QK2M9F",
    "out": "outputs/Llama2-7B-LoRA-r16-alpha32-dropout005-lr2e4-bs128",
    "cache": "models--bert-base-uncased/snapshots/86b5e0934494bd15c9632b12f734a8a67f723594",
    "exp": "exp_ResNet18_CIFAR10_lr0_1_bs128_SGD",
    "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "SHA256_CHECKSUMS": ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],
    "revision": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
    "run_id": "3kf9x2ab",
    "uuid": "550e8400-e29b-41d4-a716-446655440000",
    "url": "https://huggingface.co/datasets/imdb/resolve/main/plain_text/train-00000-of-00001.parquet",
    "bucket": "gs://my-bucket/datasets/imagenet/train-00001-of-01024",
    "master": "54.23.11.7",
    "alphabet": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    "classes": ["BertForSequenceClassification", "XLMRobertaForTokenClassification"],
    "auth_method": "oauth2",
    "choice": "type=triton_BLOCK-M=128_BLOCK-K=32_BLOCK-N=128_numstages=3_numwarps=4",
}


def test_ordinary_training_values_and_source_are_no_secrets() -> None:
    env = EnvSecrets(ENVIRON)
    assert find_in_value("CONFIG", ORDINARY_TRAINING, env) is None
    source = "".join(f"{k.upper()} = {v!r}\n" for k, v in ORDINARY_TRAINING.items())
    source += "def train(model_id='NousResearch/Nous-Hermes-2-Mixtral-8x7B-DPO'):\n    pass\n"
    assert find_in_source(source, "c", env) is None


# -- through the magic: each shape refused on both backends, its value shown nowhere ----------

SHAPES_IN_CELLS = {
    "dict value under generic names": (
        "creds = {'user': 'alice', 'pw': 'hunter2-Secret!'}\n"
        "def train():\n    return len(creds['pw'])",
        "result = train()",
        "hunter2-Secret!",
        ["creds['pw'] in 'creds' (cell [1])", "--secret-env PW=pw/pw", "--env PW "],
    ),
    "read from a secret variable": (
        "import os\nTOKEN = os.environ['MY_SERVICE_CRED']\ndef train():\n    return len(TOKEN)",
        "result = train()",
        SERVICE_CRED,
        [
            "'TOKEN' (cell [1])",
            "environment variable MY_SERVICE_CRED",
            "--secret-env MY_SERVICE_CRED=my-service-cred/cred",
            "--env MY_SERVICE_CRED ",
        ],
    ),
    "an API key without its usual prefix": (
        'import os\nOPENAI_API_KEY = os.environ["OPENAI_API_KEY"]\n'
        "def train():\n    return len(OPENAI_API_KEY)",
        "result = train()",
        PROXY_KEY,
        ["'OPENAI_API_KEY' (cell [1])", "--secret-env OPENAI_API_KEY=", "--env OPENAI_API_KEY "],
    ),
    "a generic name holding an environment secret": (
        "import os\nHEADERS = {'X-Api': os.environ['MY_SERVICE_CRED']}\n"
        "def train():\n    return len(HEADERS)",
        "result = train()",
        SERVICE_CRED,
        ["HEADERS['X-Api'] in 'HEADERS' (cell [1])", "--env MY_SERVICE_CRED "],
    ),
    "a concatenated global": (
        "KEY = 'sk-proj-' + 'Q' * 40\ndef train():\n    return len(KEY)",
        "result = train()",
        "sk-proj-" + "Q" * 40,
        ["'KEY' (cell [1])", "--secret-env OPENAI_API_KEY=", "--env OPENAI_API_KEY "],
    ),
    "a concatenated default": (
        "def train(k='sk-proj-' + 'Q' * 40):\n    return len(k)",
        "result = train()",
        "sk-proj-" + "Q" * 40,
        ["default of k (line 1) in 'train' (cell [1])", "--env OPENAI_API_KEY "],
    ),
    "a concatenation in the cell": (
        "x = 1",
        "key = 'sk-proj-' + 'Q' * 40\nresult = len(key)",
        "sk-proj-" + "Q" * 40,
        ["key (line 1) in the %%ktrain cell", "--env OPENAI_API_KEY "],
    ),
    "a high-entropy default": (
        f"def train(key={AWS_SECRET!r}):\n    return len(key)",
        "result = train()",
        AWS_SECRET,
        ["default of key (line 1) in 'train' (cell [1])", "by its entropy", "--env SECRET_TOKEN "],
    ),
}
BACKENDS = {
    "kubernetes": "--backend kubernetes --image python:3.12 --dry-run",
    "local": "--dry-run",
}


@pytest.fixture
def magic_shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    for name, value in ENVIRON.items():
        if name not in ("PWD", "HOME"):
            monkeypatch.setenv(name, value)
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    yield sh
    sh.reset(new_session=True)


def _files(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("shape", sorted(SHAPES_IN_CELLS))
def test_each_shape_is_refused_in_one_error_and_its_value_is_shown_nowhere(
    shape: str,
    backend: str,
    magic_shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    ktrain_home: Path,
) -> None:
    cell, body, value, fragments = SHAPES_IN_CELLS[shape]
    assert magic_shell.run_cell(cell, store_history=True).success
    with pytest.raises(UsageError) as info:
        magic_shell.run_cell_magic("ktrain", BACKENDS[backend], body)
    message = str(info.value)
    assert message.count("ktrain: ") == 1
    for fragment in [*fragments, "is a secret", "nothing was created", "--allow-secret "]:
        assert fragment in message, message
    shown = capsys.readouterr()
    for place, text in {"error": message, "stdout": shown.out, "stderr": shown.err}.items():
        assert value not in text, place
    assert value.encode() not in _files(ktrain_home)


def _rendered(plan: Any) -> bytes:
    """Everything a dry run renders: its text, its objects, the files shipped with the code and
    the program's pickle stream, decoded."""
    stream = re.search(r'b64decode\(\n    "([^"]*)"', plan.program.source)
    return b"".join(
        [
            plan.describe().encode(),
            json.dumps(asdict(plan.request), default=str).encode(),
            *plan.files.values(),
            *plan.program.files.values(),
            base64.b64decode(stream.group(1)) if stream else b"",
        ]
    )


@pytest.mark.parametrize(
    ("backend", "flags"),
    [
        ("kubernetes", "--secret-env MY_SERVICE_CRED=my-service-cred/cred"),
        ("local", "--env MY_SERVICE_CRED"),
    ],
)
def test_the_suggested_flag_reads_the_value_in_the_job_and_renders_it_nowhere(
    backend: str,
    flags: str,
    magic_shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    ktrain_home: Path,
) -> None:
    cell = (
        "import os, collections\nTOKEN = os.environ['MY_SERVICE_CRED']\n"
        "STATS = collections.OrderedDict(steps=3)\n"
        "def train():\n    return len(TOKEN), STATS['steps']"
    )
    assert magic_shell.run_cell(cell, store_history=True).success
    job = magic_shell.run_cell_magic("ktrain", f"{BACKENDS[backend]} {flags}", "result = train()")
    assert job.dry_run
    source = job.plan.program.source
    assert "TOKEN = __import__('os').environ['MY_SERVICE_CRED']" in source
    assert "_KTRAIN_VALUES" in source  # STATS travels in the pickle stream, checked below
    rendered = _rendered(job.plan) + capsys.readouterr().out.encode() + _files(ktrain_home)
    assert b"OrderedDict" in rendered  # the decoded pickle stream is among what was searched
    assert SERVICE_CRED.encode() not in rendered
