"""The official `openai` Python client against `nanobot serve` (issue 18, acceptance 1).

Usage: check.py BASE_URL API_KEY

Runs the models list, a whole answer, a streamed one, a streamed one with usage, and the
error shapes (a wrong key, an unknown model, a bad request) as the client sees them, and
prints one JSON report. Exits 1 when anything differs from what OpenAI's API would give.
"""

import json
import sys

import openai

base_url, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)
report = {"openai": openai.__version__, "checks": {}}
failed = []


def check(name, ok, detail):
    report["checks"][name] = {"ok": bool(ok), "detail": detail}
    if not ok:
        failed.append(name)


models = client.models.list()
ids = [m.id for m in models.data]
check("models", ids == ["nanobot"], ids)

whole = client.chat.completions.create(
    model="nanobot",
    messages=[{"role": "user", "content": "turn 1"}],
    extra_headers={"X-Session-Id": "openai-client"},
)
check(
    "non_stream",
    whole.object == "chat.completion"
    and whole.choices[0].message.role == "assistant"
    and whole.choices[0].message.content == "answer to 1"
    and whole.choices[0].finish_reason == "stop"
    and whole.usage.total_tokens > 0,
    whole.model_dump(),
)

pieces, finish, roles = [], None, []
for chunk in client.chat.completions.create(
    model="nanobot",
    messages=[{"role": "user", "content": "turn 2"}],
    stream=True,
    extra_headers={"X-Session-Id": "openai-client"},
):
    for choice in chunk.choices:
        if choice.delta.role:
            roles.append(choice.delta.role)
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
check(
    "stream",
    "".join(pieces) == "answer to 2" and finish == "stop" and roles == ["assistant"],
    {"text": "".join(pieces), "finish": finish, "roles": roles},
)

usage, last_choices, text = None, None, []
for chunk in client.chat.completions.create(
    model="nanobot",
    messages=[{"role": "user", "content": "turn 3"}],
    stream=True,
    stream_options={"include_usage": True},
    extra_body={"session_id": "openai-client"},
):
    last_choices = chunk.choices
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            text.append(choice.delta.content)
check(
    "stream_usage",
    usage is not None and usage.total_tokens > 0 and last_choices == [] and "".join(text) == "answer to 3",
    {"usage": usage.model_dump() if usage else None, "text": "".join(text)},
)

try:
    openai.OpenAI(base_url=base_url, api_key="sk-wrong", max_retries=0).models.list()
    check("error_unauthorized", False, "no error")
except openai.AuthenticationError as error:
    check(
        "error_unauthorized",
        error.status_code == 401 and error.body.get("code") == "invalid_api_key",
        {"status": error.status_code, "body": error.body},
    )

try:
    client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    check("error_model", False, "no error")
except openai.NotFoundError as error:
    check(
        "error_model",
        error.status_code == 404 and error.body.get("code") == "model_not_found",
        {"status": error.status_code, "body": error.body},
    )

try:
    client.chat.completions.create(model="nanobot", messages=[{"role": "assistant", "content": "hi"}])
    check("error_bad_request", False, "no error")
except openai.BadRequestError as error:
    check(
        "error_bad_request",
        error.status_code == 400 and error.body.get("type") == "invalid_request_error",
        {"status": error.status_code, "body": error.body},
    )

report["failed"] = failed
print(json.dumps(report, indent=2, default=str))
sys.exit(1 if failed else 0)
