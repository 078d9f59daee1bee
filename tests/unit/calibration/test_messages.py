"""Messages about inputs name the file they are about."""


def test_a_file_that_is_neither_csv_nor_json_is_named(tmp_path):
    """A measured file that is neither a CSV of the columns nor a benchmark JSON: the
    message names the file, so a user with several inputs knows which one."""
    import pytest

    from allocator.calibration import read_measured
    from allocator.exceptions import InputError
    from allocator.io.build import problem_from_file

    notes = tmp_path / "notes.txt"
    notes.write_text("some notes\nnot a table\n")
    problem = problem_from_file("problems/serving-eagle.yaml")
    with pytest.raises(InputError) as info:
        read_measured(notes, problem)
    assert str(notes) in str(info.value)


def test_the_empirical_model_names_the_log_that_is_not_csv(tmp_path):
    import pytest

    from allocator.estimate.outcomes import estimate_outcomes
    from allocator.exceptions import InputError

    log = tmp_path / "log.jsonl"
    log.write_text("{}\n")
    with pytest.raises(InputError) as info:
        estimate_outcomes(log, tmp_path / "out.yaml", errors="empirical")
    assert str(log) in str(info.value) and "--" not in str(info.value)
