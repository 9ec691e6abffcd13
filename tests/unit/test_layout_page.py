"""docs/layout.md against the tree (devtools/layout_page.py reads both), and the links between the
README and the docs pages. Each check is also run on a page drifted on purpose, to show it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import layout_page as lp

PAGE = lp.read_page()


# --- the page as it is ---------------------------------------------------------------------------------

def test_the_tree_names_every_package_folder_with_modules_and_every_top_level_folder():
    assert lp.unnamed_folders(PAGE) == []


def test_every_path_the_page_names_exists():
    assert lp.missing_paths(PAGE) == []


def test_every_module_of_the_package_is_named_in_its_folder_section():
    assert lp.unnamed_modules(PAGE) == []


def test_largest_files_lists_every_module_over_450_lines_with_a_count_within_15_percent():
    assert lp.largest_files_problems(PAGE) == []


def test_every_relative_link_of_the_readme_and_the_docs_reaches_an_existing_file_and_heading():
    assert lp.broken_links() == []


# --- the same checks on a drifted page ----------------------------------------------------------------

def _module_line(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"- `{name}`"))


def test_a_path_that_does_not_exist_is_reported():
    drifted = PAGE.replace("- `splitter.py`:", "- `splitter.py`, `chunker.py`:")
    assert lp.missing_paths(drifted) == [
        f"line {_line_of(drifted, 'chunker.py')}: 'airflow_provider_mysqlcdc/cdc/planning/chunker.py' "
        "(backticks) does not exist"]


def test_a_path_written_from_the_root_that_does_not_exist_is_reported():
    drifted = PAGE + "\nSee `bin/stream`.\n"
    assert any("'bin/stream'" in p for p in lp.missing_paths(drifted))


def test_a_folder_in_the_tree_that_does_not_exist_is_reported():
    drifted = PAGE.replace("    model/ ", "    models/", 1)
    assert any("'airflow_provider_mysqlcdc/cdc/models/' (tree) does not exist" in p for p in lp.missing_paths(drifted))


def test_a_bare_file_name_outside_a_folder_section_is_reported():
    drifted = PAGE.replace("## Folders", "The builder is `pipeline.py`.\n\n## Folders", 1)
    assert any("'pipeline.py' is a bare name outside a folder section" in p for p in lp.missing_paths(drifted))


def test_a_tree_line_that_is_not_a_folder_is_reported():
    drifted = PAGE.replace("  links/  ", "  links.py", 1)
    assert any("not a tree line" in p for p in lp.missing_paths(drifted))


def test_a_folder_left_out_of_the_tree_is_reported():
    tree_line = next(line for line in PAGE.splitlines() if line.startswith("  triggers/"))
    drifted = PAGE.replace(tree_line + "\n", "", 1)
    assert "airflow_provider_mysqlcdc/triggers/" in lp.unnamed_folders(drifted)


def test_a_module_left_out_of_its_section_is_reported():
    drifted = PAGE.replace(_module_line(PAGE, "factory.py") + "\n", "", 1)
    assert lp.unnamed_modules(drifted) == ["airflow_provider_mysqlcdc/sinks/factory.py"]


def test_a_module_listed_under_another_folder_is_not_named():
    line = _module_line(PAGE, "retry.py")
    drifted = PAGE.replace(line + "\n", "", 1).replace("### `airflow_provider_mysqlcdc/links/`\n",
                                                       "### `airflow_provider_mysqlcdc/links/`\n\n" + line + "\n", 1)
    assert "airflow_provider_mysqlcdc/cdc/source/retry.py" in lp.unnamed_modules(drifted)


def test_a_line_count_off_by_more_than_15_percent_is_reported_and_one_within_is_accepted():
    path = "airflow_provider_mysqlcdc/spark/stream_job.py"
    actual = lp.line_count(lp.ROOT / path)
    stated = lp.listed_largest(PAGE)[path]

    def page_with(count: int) -> str:
        return PAGE.replace(f"| `{path}` | {stated} |", f"| `{path}` | {count} |")

    assert lp.largest_files_problems(page_with(int(actual * 1.14))) == []
    assert lp.largest_files_problems(page_with(int(actual * 0.84))) == [
        f"{path} is listed with {int(actual * 0.84)} lines but has {actual}"]


def test_a_module_of_more_than_450_lines_left_out_of_the_table_is_reported():
    """Checked with a threshold just below the largest module's size: no module of the package is
    over 450 lines any more, which this page's check keeps so."""
    path, lines = lp.largest_modules()[0]
    drifted = PAGE.replace(f"| `{path}` | {lp.listed_largest(PAGE)[path]} |\n", "")
    assert lp.largest_files_problems(drifted, must_list_above=lines - 1) == [
        f"{path} has {lines} lines (more than {lines - 1}) but is not listed"]


def test_no_module_of_the_package_is_over_450_lines():
    assert [(path, lines) for path, lines in lp.largest_modules() if lines > lp.MUST_LIST_ABOVE] == []


def test_a_listed_module_that_does_not_exist_is_reported():
    drifted = PAGE.replace("|---|---|\n", "|---|---|\n| `airflow_provider_mysqlcdc/spark/gone.py` | 600 |\n", 1)
    assert "airflow_provider_mysqlcdc/spark/gone.py is listed but does not exist" in lp.largest_files_problems(drifted)


def test_the_generated_charset_tables_are_left_out_of_the_largest_files():
    generated = "airflow_provider_mysqlcdc/cdc/records/charset_tables.py"
    assert lp.line_count(lp.ROOT / generated) > lp.MUST_LIST_ABOVE
    assert generated not in dict(lp.largest_modules())
    drifted = PAGE.replace("|---|---|\n", f"|---|---|\n| `{generated}` | 3985 |\n", 1)
    assert f"{generated} is generated and belongs out of the table" in lp.largest_files_problems(drifted)


def test_the_printed_table_is_the_ten_largest_modules_in_order(capsys):
    assert lp.main([]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert len(rows) == lp.LARGEST_COUNT
    counts = [int(row.rsplit("|", 2)[1]) for row in rows]
    assert counts == sorted(counts, reverse=True)


# --- which folders are required, on a checkout of our own ---------------------------------------------

def test_hidden_venv_egg_info_and_build_output_folders_are_not_required(tmp_path: Path):
    for folder in (".ci", ".venv", "build", "dist", "var", "thing.egg-info", "bin", f"{lp.PACKAGE}/cdc/model",
                   f"{lp.PACKAGE}/cdc/__pycache__", f"{lp.PACKAGE}/empty"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / lp.PACKAGE / "cdc" / "model" / "offset.py").write_text("")
    (tmp_path / lp.PACKAGE / "cdc" / "__pycache__" / "offset.py").write_text("")
    assert lp.required_folders(tmp_path) == ["airflow_provider_mysqlcdc/", "airflow_provider_mysqlcdc/cdc/model/",
                                             "bin/"]


# --- links ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("heading, anchor", [
    ("Event -> what happens to the sink", "event---what-happens-to-the-sink"),
    ("DAG params (`mysqlcdc_params`)", "dag-params-mysqlcdc_params"),
    ("The pipeline's state", "the-pipelines-state"),
    ("`spark`: where Spark runs", "spark-where-spark-runs"),
])
def test_headings_get_the_anchors_github_gives_them(heading, anchor):
    assert lp.github_anchor(heading) == anchor


def test_a_link_to_a_missing_page_a_missing_heading_or_outside_the_repository_is_reported(tmp_path: Path):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "x.md").write_text("# X\n")
    (root / "docs" / "a.md").write_text("# A\n\n## The state\n\n[back](../README.md#top) [self](#a)\n")
    (root / "README.md").write_text(
        "# Top\n[ok](docs/a.md#the-state) [gone](docs/b.md) [heading](docs/a.md#deploying) [out](../shared/x.md)\n"
        "```\n[in a code block](nowhere.md)\n```\n[web](https://example.com/x.md)\n")
    assert lp.broken_links(root) == [
        "README.md:2: docs/b.md: no such file",
        "README.md:2: docs/a.md#deploying: no such heading",
        "README.md:2: ../shared/x.md: outside the repository",
    ]


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)
