# Plinth: two commands. `make run` starts everything; `make test` runs every check.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint install lock clean-data

# pip prints each package as it goes (a first install on a cold cache takes a few minutes).
$(STAMP): pyproject.toml constraints.txt
	@echo "[install] 1/3 virtual environment in $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "[install] 2/3 pip"
	@$(BIN)/python -m pip install --quiet --upgrade "pip>=24,<27"
	@echo "[install] 3/3 Plinth and its dependencies (pinned in constraints.txt)"
	@$(BIN)/python -m pip install -c constraints.txt -e ".[dev]"
	@echo "[install] done"
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python scripts/run.py

test: $(STAMP)
	bash scripts/test.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	PYTHONPATH=sdk $(BIN)/lint-imports

# Re-pin every dependency after changing pyproject.toml.
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^-e' > constraints.txt

clean-data:
	rm -rf data
