"""``mmspec app``: the tab helpers (no browser), the VLM tab's handler on the bundled entry, and the app driven in a
real headless Chromium (Playwright) the way a person uses it."""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

import pytest

from mmspec.app.base import parse_params, round_segments, verifier_choices, verifier_defaults


def test_round_segments_colour_each_round_drafts_then_the_target_token():
    tokens = [10, 11, 12, 13, 14, 15, 16]
    # prefill token, round 1: 2 drafts + correction, round 2: 0 drafts + correction, round 3: 1 draft (+ cut bonus)
    segs = round_segments(tokens, [2, 0, 1, 3], lambda ids: " ".join(map(str, ids)))
    assert segs == [("10", "target"), ("11 12", "draft"), ("13", "target"), ("14", "target"), ("15", "draft"),
                    ("16", "target")]  # fmt: skip
    assert round_segments([], [1], str) == []
    assert round_segments([5, 2], [0], lambda ids: "" if ids == [2] else "five") == [("five", "target")]  # EOS: nothing


def test_the_app_times_a_warm_up_then_interleaved_repetitions_and_shows_the_warm_up_output():
    from mmspec.app.base import timed_pair

    calls = []

    def side(name):
        return lambda: calls.append(name) or len(calls)

    plain, spec = timed_pair(side("plain"), side("spec"), 3)
    assert calls == ["plain", "spec", "plain", "spec", "spec", "plain", "plain", "spec"]  # warm-ups, then rotated
    assert (plain.value, spec.value, plain.reps) == (1, 2, 3) and plain.seconds >= 0 and spec.seconds >= 0
    with pytest.raises(ValueError, match="reps: expected an int >= 1"):
        timed_pair(side("plain"), side("spec"), 0)


def test_parameter_boxes_show_each_verifiers_defaults_and_reject_bad_json():
    assert "greedy" in verifier_choices() and "reflection-coupling" not in verifier_choices()
    assert verifier_defaults("greedy") == {} and verifier_defaults("ssd") == {"beta": 0.1}
    assert parse_params("", "x") == {} and parse_params('{"beta": 0.2}', "x") == {"beta": 0.2}
    with pytest.raises(ValueError, match="verifier parameters: expected a JSON object"):
        parse_params("beta=0.2", "verifier parameters")
    with pytest.raises(ValueError, match="expected a JSON object"):
        parse_params("[1, 2]", "verifier parameters")


gradio = pytest.importorskip("gradio")


def test_vlm_handler_runs_plain_and_speculative_side_by_side_and_refuses_bad_input():
    from mmspec.app.vlm import example_scene, run

    image, caption = example_scene(0)
    assert caption.startswith(("1 shape", "2 shapes", "3 shapes", "4 shapes"))
    plain, segments, summary, figure = run(image, "caption :", "small VLM", "greedy", "", 5, 0.0, 0, 48, reps=2)
    spoken = " ".join(text for text, _ in segments)
    assert plain == spoken and plain  # greedy speculative decoding is token-identical to plain decoding
    assert {who for _, who in segments} == {"draft", "target"} and "lossless" in summary and figure is not None
    assert "medians of 2 interleaved runs after a warm-up" in summary
    _, _, lossy, _ = run(image, "caption :", "text-only LM", "ssd", '{"beta": 0.3}', 4, 0.8, 3, 16, reps=1)
    assert "**lossy**" in lossy
    for args, message in [((None, "caption :"), "image: expected an image"), ((image, "  "), "prompt: expected"),
                          ((image, "caption :", "small VLM", "greedy", "{bad"), "verifier parameters")]:  # fmt: skip
        full = list(args) + ["small VLM", "greedy", "", 5, 0.0, 0, 8][len(args) - 2 :]
        with pytest.raises(gradio.Error, match=message):
            run(*full)
    with pytest.raises(gradio.Error, match="model directory: no such folder"):
        run(image, "caption :", "small VLM", "greedy", "", 5, 0.0, 0, 8, "/nowhere/at/all")
    with pytest.raises(gradio.Error, match="num_draft_tokens: expected an int >= 1"):
        run(image, "caption :", "small VLM", "greedy", "", 0, 0.0, 0, 8)


def test_image_ar_handler_shows_both_images_and_when_each_code_was_committed():
    from mmspec.app.image_ar import commit_rounds, method_defaults, run

    assert commit_rounds(8, [2, 0, 3]) == [0, 1, 1, 1, 2, 3, 3, 3]
    assert method_defaults("gsd") == {"ranks": 7, "prob_tol": 0.15} and "neighbours_k" in method_defaults("lantern")
    plain, spec, summary, heat = run("red circle at top left", "mc-sjd", "", 16, 2.0, 1.0, 0, reps=1)
    assert plain.size == spec.size == (128, 128) and "lossless" in summary and heat is not None
    _, _, lossy, _ = run("blue square at center", "lantern-jacobi", '{"delta": 0.2, "lam": null, "neighbours_k": 8}', 16,
                         2.0, 1.0, 1)  # fmt: skip
    assert "**lossy**" in lossy and "TV(p, p~)" in lossy
    with pytest.raises(gradio.Error, match="condition"):
        run("purple hexagon", "mc-sjd", "", 16, 2.0, 1.0, 0)
    with pytest.raises(gradio.Error, match="method: expected a speculative method"):
        run("red circle at top left", "plain", "", 16, 2.0, 1.0, 0)


def test_diffusion_handler_shows_the_accept_reject_timeline():
    from mmspec.app.diffusion import method_defaults, run

    assert method_defaults("asd") == {"draft": None, "verifier": "reflection-coupling", "verifier_params": None}
    assert method_defaults("paradigms") == {"tolerance": 0.1} and "tau0" in method_defaults("speca")
    plain, spec, summary, timeline = run("red circle at top left", "asd", "", "ddpm", 20, 4, 1.0, 1.0, 0, reps=1)
    assert plain.size == spec.size == (128, 128) and "lossless" in summary and timeline is not None
    with pytest.raises(gradio.Error, match="deterministic"):
        run("red circle at top left", "asd", "", "ddim", 20, 4, 0.0, 1.0, 0)
    with pytest.raises(gradio.Error, match="lookahead: not a parameter|tau0"):
        run("red circle at top left", "paradigms", '{"tau0": 1}', "ddpm", 20, 4, 1.0, 1.0, 0)
    _, _, lossy, none = run("red circle at top left", "paradigms", '{"tolerance": 0.2}', "ddpm", 20, 4, 1.0, 1.0, 0, reps=1)
    assert "**lossy**" in lossy and none is None  # Picard drafts no chain to time-line
    _, _, gated, _ = run("red circle at top left", "speca", '{"tau0": 0.05}', "ddim", 20, 4, 0.0, 1.0, 0, reps=1)
    assert "**lossy**" in gated  # forecast gating works with a deterministic sampler


def test_video_handler_on_an_example_clip():
    from mmspec.app.video import example_clip, run

    path, caption = example_clip(1)
    plain, segments, summary, _ = run(path, "caption :", "small video LM", "greedy", "", 5, 0.0, 0, 64, reps=1)
    assert plain == " ".join(t for t, _ in segments) and caption.endswith(" .") and "lossless" in summary
    with pytest.raises(gradio.Error, match="video: expected a video file"):
        run(None, "caption :", "small video LM", "greedy", "", 5, 0.0, 0, 64)
    with pytest.raises(gradio.Error, match="video: no such file"):
        run("/nowhere.mp4", "caption :", "small video LM", "greedy", "", 5, 0.0, 0, 64)


def test_video_handler_refuses_a_corrupt_file_with_the_librarys_message(tmp_path):
    from mmspec.app.video import run

    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    with pytest.raises(gradio.Error, match="video: OpenCV could not decode any frame"):
        run(str(bad), "caption :", "small video LM", "greedy", "", 5, 0.0, 0, 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.mp4"]  # nothing written beside it


def test_report_renders_every_committed_benchmark(tmp_path):
    from mmspec.app.report import BENCHMARKS, load_results, write_report

    out = write_report(BENCHMARKS, tmp_path / "report.html")
    page = out.read_text()
    assert page.count("<table>") == len(load_results(BENCHMARKS)) and page.count("data:image/png;base64,") >= 5
    assert "speedup vs plain" in page and 'class="lossy"' in page and "vs Hugging Face" in page
    (tmp_path / "bench-bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a bench JSON object"):
        load_results(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such benchmark folder"):
        load_results(tmp_path / "missing")


def test_cli_report_and_the_app_builder(tmp_path, capsys):
    from mmspec.app import APP_TABS, build_app
    from mmspec.cli import main

    main(["report", "--out", str(tmp_path / "r.html")])
    assert "written to" in capsys.readouterr().out and (tmp_path / "r.html").read_text().startswith("<!doctype html>")
    assert {"vlm", "video", "image-ar", "diffusion", "results"} <= set(APP_TABS.names())
    with pytest.raises(ValueError, match="tabs: expected names among"):
        build_app(["vlm", "speech"])
    assert build_app(["results"]) is not None


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ARTIFACTS = Path(os.environ.get("MMSPEC_TEST_ARTIFACTS", Path(__file__).parent / "artifacts"))


@pytest.fixture(scope="module")
def served_app():
    from mmspec.app import build_app

    app = build_app()
    port = _free_port()
    app.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, show_error=False, quiet=True)
    yield f"http://127.0.0.1:{port}"
    app.close()


@pytest.fixture(scope="module")
def client(served_app):
    from gradio_client import Client

    return Client(served_app, verbose=False)


def _mean_accepted(summary: str) -> float:
    return float(re.search(r"per target call: \*\*([0-9.]+)\*\*", summary).group(1))


def test_api_vlm_and_video_agree_with_the_library_call(client, tmp_path):
    """Every token tab's endpoint through gradio_client: plain text, speculative text and its statistics are the
    library's on the same input (greedy: deterministic)."""
    from gradio_client import handle_file

    from mmspec import VideoSpeculator, VLMSpeculator, zoo
    from mmspec.app.vlm import example_scene

    m = zoo.load("shapes-vlm")
    image, _ = example_scene(3)
    image.save(tmp_path / "scene.png")
    plain, segments, summary, plot = client.predict(handle_file(str(tmp_path / "scene.png")), "caption :", "small VLM",
                                                    "greedy", "", 5, 0.0, 0, 48, "", 1, api_name="/vlm")  # fmt: skip
    lib = VLMSpeculator(m.target, m.processor, drafter=m.drafter_vlm).generate(image, "caption :", max_new_tokens=48,
                                                                               num_draft_tokens=5)  # fmt: skip
    assert " ".join(seg["token"] for seg in segments) == lib.texts[0] == plain
    assert _mean_accepted(summary) == round(lib.stats.mean_accepted_tokens, 2) and plot["type"] == "matplotlib"
    v = zoo.load("shapes-video")
    path, truth = client.predict(2, api_name="/video_example")
    plain, segments, summary, _ = client.predict(handle_file(path), "caption :", "EAGLE head", "greedy", "", 5, 0.0, 0, 64,
                                                 8, "", 1, api_name="/video")  # fmt: skip
    lib = VideoSpeculator(v.target, v.processor, drafter=mmspec_eagle(v)).generate(path, "caption :", max_new_tokens=64,
                                                                                   num_draft_tokens=5)  # fmt: skip
    assert " ".join(seg["token"] for seg in segments) == lib.texts[0] == plain and truth.endswith(" .")
    assert _mean_accepted(summary) == round(lib.stats.mean_accepted_tokens, 2)


def mmspec_eagle(models):
    from mmspec.drafters import EagleDrafter

    return EagleDrafter(models.target, models.eagle)


def test_api_image_ar_and_diffusion_agree_with_the_library_call(client):
    from mmspec import zoo

    plain, spec, summary, _ = client.predict("green square at center", "mc-sjd", "", 16, 2.0, 1.0, 5, "random", "", 1,
                                             api_name="/image_ar")  # fmt: skip
    lib = zoo.load("shapes-t2i").speculator(cfg_scale=2.0).generate(["green square at center"], "mc-sjd",
                                                                     num_draft_tokens=16, temperature=1.0, seed=5)  # fmt: skip
    assert Path(plain).exists() and Path(spec).exists() and _mean_accepted(summary) == round(lib.stats.mean_accepted_tokens, 2)
    plain, spec, summary, timeline = client.predict("red circle at top left", "asd", "", "ddpm", 30, 4, 1.0, 1.0, 2, "", 1,
                                                    api_name="/diffusion")  # fmt: skip
    lib = zoo.load("shapes-ddpm").speculator().generate(["red circle at top left"], method="asd", num_inference_steps=30,
                                                        num_draft_tokens=4, seed=2)  # fmt: skip
    assert Path(spec).exists() and _mean_accepted(summary) == round(lib.stats.mean_accepted_tokens, 2)
    assert f"target calls {lib.stats.rounds}," in summary and timeline["type"] == "matplotlib"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def test_concurrent_requests_all_complete_and_memory_stays_flat(client, tmp_path):
    """8 requests at once through the queue each get their own scene's answer; 100 requests later the process has not
    grown by more than 10 % over its size after 10."""
    from gradio_client import handle_file

    from mmspec import VLMSpeculator, zoo
    from mmspec.app.vlm import example_scene

    if not Path("/proc/self/status").exists():
        pytest.skip("memory is read from /proc (Linux)")
    m = zoo.load("shapes-vlm")
    lib = VLMSpeculator(m.target, m.processor, drafter=m.drafter_vlm)
    files, expected = [], []
    for i in range(8):
        image, _ = example_scene(i)
        image.save(tmp_path / f"s{i}.png")
        files.append(handle_file(str(tmp_path / f"s{i}.png")))
        expected.append(lib.generate(image, "caption :", max_new_tokens=12, num_draft_tokens=4).texts[0])
    args = ("caption :", "small VLM", "greedy", "", 4, 0.0, 0, 12, "", 1)
    jobs = [client.submit(f, *args, api_name="/vlm") for f in files]
    answers = [" ".join(seg["token"] for seg in job.result(timeout=300)[1]) for job in jobs]
    assert answers == expected
    for i in range(100):
        client.predict(files[i % 8], *args, api_name="/vlm")
        if i == 9:
            after_10 = _rss_mb()
    assert _rss_mb() <= 1.10 * after_10, (after_10, _rss_mb())


def test_app_in_a_real_browser(served_app):
    """As a person would: in every tab, run one generation by clicking and read the outputs and the speedup (a
    screenshot per tab goes to tests/artifacts/); an empty prompt shows the library's error, not a traceback."""
    playwright = pytest.importorskip("playwright.sync_api")
    browser_path = _chromium()
    if browser_path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it (make browser: apt-get install chromium)")
        pytest.skip("no chromium on this machine: `make browser` (apt-get install -y chromium) enables this test")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox", "--disable-gpu",
                                    "--disable-background-networking", "--disable-component-update", "--disable-sync"])  # fmt: skip
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(served_app, timeout=60_000)

        def run_tab(tab: str, prefix: str, units: str, before=None):
            page.get_by_role("tab", name=tab).click()
            if before:
                before()
            page.click(f"#{prefix}-run")
            page.locator(f"#{prefix}-summary").get_by_text(f"mean accepted {units} per target call").wait_for(timeout=180_000)
            summary = page.locator(f"#{prefix}-summary").inner_text()
            assert re.search(r"plain [0-9.]+ s, speculative [0-9.]+ s: [0-9.]+x", summary), summary
            page.wait_for_timeout(500)
            page.screenshot(path=str(ARTIFACTS / f"app-{prefix}.png"), full_page=True)
            return summary

        def load_scene():
            page.click("#vlm-load")
            page.wait_for_function("() => document.querySelector('#vlm-truth textarea').value.length > 0", timeout=60_000)

        assert "lossless" in run_tab("VLM: image captioning / QA", "vlm", "tokens", load_scene)
        plain = page.locator("#vlm-plain textarea").input_value()
        assert plain and plain.split()[0] in page.locator("#vlm-spec").inner_text()

        def load_clip():
            page.click("#vid-load")
            page.wait_for_function("() => document.querySelector('#vid-truth textarea').value.length > 0", timeout=60_000)

        run_tab("video LM: clip captioning / QA", "vid", "tokens", load_clip)
        assert "not playable" not in page.content()  # the example clip is VP8 WebM, which Chromium plays
        run_tab("image AR: VQ-code generation", "iar", "codes")
        assert page.locator("#iar-spec img").count() == 1
        run_tab("diffusion: speculative sampling", "dif", "steps")
        assert page.locator("#dif-plain img").count() == 1
        page.get_by_role("tab", name="benchmark results").click()
        page.locator("#results table").first.wait_for(timeout=60_000)
        assert page.locator("#results table").count() >= 5
        page.screenshot(path=str(ARTIFACTS / "app-results.png"))
        page.get_by_role("tab", name="VLM: image captioning / QA").click()
        page.fill("#vlm-prompt textarea", "")
        page.click("#vlm-run")
        page.get_by_text("prompt: expected a question").first.wait_for(timeout=60_000)  # the error toast
        assert "Traceback" not in page.content()
        browser.close()
