"""The wizard starts simple (Issue 18): templates one click away, a Basics step with every other
section collapsed behind a summary, TP offered as the widths the model's heads divide,
quantization by the names people know, help with a link to SGLang's docs for each flag, and a
fit panel that shows headroom (full-length requests that fit) instead of "79.7 of 79.7 GiB"."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from deployments.endpoints import forms, presets
from deployments.endpoints.models import Deployment
from runtime.validate import check
from tests.conftest import Cast

HTMX = {"HTTP_HX_REQUEST": "true"}
FORM = {
    "model.source": "meta-llama/Llama-3.1-8B-Instruct",
    "hardware.gpu": "H100-SXM",
    "parallelism.tp": "1",
    "autoscaling.min_replicas": "1",
    "autoscaling.max_replicas": "3",
}


def _validate(client: Client, **changes: str) -> str:
    form: dict[str, Any] = {**FORM, **{k.replace("__", "."): v for k, v in changes.items()}}
    return client.post("/endpoints/validate/", form, **HTMX).content.decode()


def test_every_template_is_sound_as_it_stands() -> None:
    for preset in presets.PRESETS:
        spec, issues = check(preset.spec_copy())
        assert spec is not None and issues == [], (preset.key, issues)


def test_the_create_page_offers_each_template_as_one_link(alice: Client, cast: Cast) -> None:
    page = alice.get("/endpoints/new/").content.decode()
    for preset in presets.PRESETS:
        assert f'href="/endpoints/new/?template={preset.key}"' in page
        assert preset.title in page
    assert 'id="template-optimizer" href="/optimize/"' in page


def test_a_template_fills_the_form_and_names_the_endpoint(alice: Client, cast: Cast) -> None:
    page = alice.get("/endpoints/new/?template=long-context").content.decode()
    assert 'aria-current="true"' in page and 'id="template-chosen"' in page
    assert 'id="f-slug" name="slug" value="long-context"' in page
    assert 'name="model.context_length" value="131072"' in page
    assert '<option value="fp8_e4m3" selected>FP8 (E4M3) (fp8_e4m3)</option>' in page
    verdict = page.split('id="fit-verdict"')[1].split("</p>")[0]
    assert "Fits 6 requests of 131072 tokens at once" in verdict
    # Creating it needs nothing more than the form as it came.
    form = {k: v for k, v in _posted_defaults(page).items()}
    response = alice.post("/endpoints/new/", form)
    assert response.status_code == 302, response.content.decode()[-2000:]
    target = Deployment.objects.get(slug="long-context").target_revision
    assert target is not None and target.spec["model"]["context_length"] == 131072


def _posted_defaults(page: str) -> dict[str, str]:
    """What a browser posts for the page's form as rendered (inputs' values, selected options)."""
    form = page.split('id="settings-form"')[1].split("</form>")[0]
    posted: dict[str, str] = {}
    for tag in re.findall(r"<input[^>]*>", form):
        name = re.search(r'name="([^"]+)"', tag)
        if name is None or ('type="checkbox"' in tag and "checked" not in tag):
            continue
        value = re.search(r'value="([^"]*)"', tag)
        posted[name.group(1)] = value.group(1) if value else ""
    for name, body in re.findall(r'<select[^>]*name="([^"]+)"[^>]*>(.*?)</select>', form, re.S):
        chosen = re.search(r'<option value="([^"]*)" selected>', body)
        first = re.search(r'<option value="([^"]*)"', body)
        posted[name] = (chosen or first).group(1) if (chosen or first) else ""  # type: ignore[union-attr]
    return {k: v for k, v in posted.items() if not k.startswith("rec-")}


def test_a_template_slug_already_taken_gets_a_free_one(
    alice: Client, cast: Cast, endpoint: Deployment
) -> None:
    assert endpoint.slug == "chat"
    page = alice.get("/endpoints/new/?template=chat").content.decode()
    assert 'id="f-slug" name="slug" value="chat-2"' in page


def test_basics_are_open_and_the_rest_collapsed_with_a_summary(alice: Client, cast: Cast) -> None:
    page = alice.get("/endpoints/new/?template=chat").content.decode()
    basics = page.split('id="section-basics"')[1].split("</fieldset>")[0]
    for path in ("model.source", "hardware.gpu", "autoscaling.min_replicas"):
        assert f'name="{path}"' in basics
    batching = re.search(r'<details class="card section" id="section-batching"([^>]*)>', page)
    assert batching is not None and "open" not in batching.group(1)
    summary = page.split('id="summary-batching"')[1].split("</span>")[0]
    assert "Max running requests 24" in summary and "Schedule policy lpm" in summary
    assert 'id="summary-disaggregation">off<' in page


def test_a_section_holding_an_error_opens_and_its_summary_follows(
    alice: Client, cast: Cast
) -> None:
    body = _validate(alice, batching__max_running_requests="40")
    summary = body.split('id="summary-batching" hx-swap-oob="true">')[1].split("</span>")[0]
    assert "Max running requests 40" in summary
    refused = alice.post(
        "/endpoints/new/", {**FORM, "slug": "x", "batching.chunked_prefill_size": "0"}
    )
    section = re.search(r'id="section-batching"([^>]*)>', refused.content.decode())
    assert section is not None and "open" in section.group(1)


def test_tp_is_a_choice_of_the_widths_the_heads_divide(alice: Client, cast: Cast) -> None:
    page = alice.get("/endpoints/new/").content.decode()
    tp = page.split('id="f-parallelism-tp"')[1].split("</select>")[0]
    assert re.findall(r'<option value="(\d+)"', tp) == ["1", "2", "4", "8", "16"]
    # A described architecture of 24 heads (8 KV heads): 3, 6, 12 and 16 are not offered.
    custom = {
        "model.custom_architecture": "true",
        "model.source": "acme/custom-24h",
        "model.architecture.num_attention_heads": "24",
        "model.architecture.num_kv_heads": "8",
    }
    assert forms.tp_choices({**custom, "model.custom_architecture": True}) == (
        ("1", "1 GPU"), ("2", "2 GPUs"), ("4", "4 GPUs"), ("8", "8 GPUs"),
    )  # fmt: skip
    # The select is sent again when the heads change, never while they stay.
    same = _validate(alice, tp_for="32/8")
    assert 'id="tp-choice" hx-swap-oob="true"' not in same
    changed = _validate(alice, tp_for="any")
    assert 'id="tp-choice" hx-swap-oob="true"' in changed


def test_quantization_shows_the_names_people_know(alice: Client, cast: Cast) -> None:
    page = alice.get("/endpoints/new/").content.decode()
    method = page.split('id="f-quantization-method"')[1].split("</select>")[0]
    for text in (
        "FP8, quantized on load (fp8)",
        "NVFP4 checkpoint (ModelOpt) (modelopt_fp4)",
        "AWQ (INT4) (awq)",
        "GPTQ (INT4) (gptq)",
    ):
        assert text in method


def test_every_field_has_help_and_each_flag_links_to_sglangs_docs(
    alice: Client, cast: Cast
) -> None:
    page = alice.get("/endpoints/new/").content.decode()
    for field in forms.ALL_FIELDS:
        assert field.help, field.path
        help_text = page.split(f'id="help-{field.dom_id}">')[1].split("</p>")[0]
        if field.flag:
            assert f'href="{field.docs_url}"' in help_text and field.flag in help_text
    tp = next(f for f in forms.ALL_FIELDS if f.path == "parallelism.tp")
    assert tp.docs_url.endswith("server_arguments.html#:~:text=%2D%2Dtp%2Dsize")


def test_the_fit_shows_headroom_and_warns_below_max_running(alice: Client, cast: Cast) -> None:
    roomy = _validate(alice, model__context_length="8192", batching__max_running_requests="32")
    assert re.search(r"Fits \d+ requests of 8192 tokens at once", roomy)
    assert "Room for all 32 max running requests at full length" in roomy
    tight = _validate(alice, batching__max_running_requests="256")
    headroom = tight.split('id="fit-headroom"')[1].split("</p>")[0]
    assert "Fewer than the 256 max running requests" in headroom
    warning = tight.split("<h3>Warnings</h3>")[1].split("</aside>")[0]
    assert "Max running requests: the KV cache holds 3 requests of the full 131072-token" in warning
    assert "engine:" not in warning and "batching.max_running_requests" not in warning


def test_warnings_and_fixes_read_as_words_not_paths(alice: Client, cast: Cast) -> None:
    body = _validate(alice, speculator__algorithm="EAGLE3", parallelism__attn_dp="2",
                     parallelism__tp="2")  # fmt: skip
    shown = re.findall(r'<p class="issue issue-(?:error|warning)"[^>]*>(.*?)</p>', body, re.S)
    assert shown
    for text in shown:
        assert "speculator.draft_model" not in text and "parallelism.attn_dp" not in text, text
        assert not text.startswith("engine:"), text
