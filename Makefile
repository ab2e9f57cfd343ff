PY ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint venv clean app browser

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[dev,app]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VPY) -m mmspec.cli demo
	$(VPY) demos/caption_shapes.py --out out/captions.png
	$(VPY) demos/video_qa.py --out out/video_qa.png
	$(VPY) demos/image_ar.py --out out/image_ar.png
	$(VPY) demos/diffusion.py --out out/diffusion.png

app: $(STAMP)
	$(VPY) -m mmspec.cli app

# the browser the app's tests drive (Debian package; Playwright is pointed at it, it never downloads one)
browser:
	@command -v chromium >/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

test: $(STAMP)
	$(VPY) -m pytest -q tests

lint: $(STAMP)
	$(VPY) -m ruff check mmspec tests demos

bench: $(STAMP)
	$(VPY) -m mmspec.cli bench vlm --json benchmarks/bench-vlm.json
	$(VPY) -m mmspec.cli bench video --json benchmarks/bench-video.json --plot benchmarks/bench-video.png
	$(VPY) -m mmspec.cli bench video --long --reps 3 --json benchmarks/bench-video-long.json --plot benchmarks/bench-video-long.png
	$(VPY) -m mmspec.cli bench image-ar --json benchmarks/bench-image-ar.json --plot benchmarks/bench-image-ar-sweep.png
	$(VPY) -m mmspec.cli bench diffusion --json benchmarks/bench-diffusion.json --plot benchmarks/bench-diffusion-lookahead.png

clean:
	rm -rf $(VENV) build *.egg-info
