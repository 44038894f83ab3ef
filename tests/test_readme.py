"""README's two set-up commands are the ones CI and users run."""
import re

from conftest import ROOT


def readme_blocks():
    return re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_ci_runs_exactly_the_readme_test_command():
    test_cmd = next(b.strip() for b in readme_blocks() if "pytest" in b)
    ci_lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines()
                if ln.strip() and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert ci_lines == [test_cmd]


def test_app_command_ends_with_streamlit_run():
    app_cmd = next(b.strip() for b in readme_blocks() if "streamlit run" in b)
    assert app_cmd.endswith("streamlit run streamlit_app.py")
    assert "torch==2.13.0" in app_cmd  # never a bare `pip install torch` (a multi-GB CUDA build)
