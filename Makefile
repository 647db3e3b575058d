# Everything a fresh machine needs is installed by these targets.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 9092
DATA   ?= ./data

.PHONY: venv compile run test unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $(STAMP)

venv: $(STAMP)

# Byte-compile the sources: with PYTHONDONTWRITEBYTECODE set, every start would
# otherwise compile them again (~130 ms of start-up).
compile: venv
	$(PY) -m compileall -q protocol coordinator broker spark_client

run: venv compile
	$(VENV)/bin/eosbroker serve --host $(HOST) --port $(PORT) --data-dir $(DATA)

test: venv
	$(PY) -m pytest -q -p no:cacheprovider

unit: venv
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

bench: venv compile
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info
