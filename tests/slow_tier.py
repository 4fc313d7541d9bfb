"""The slow tier: tests of seconds each, marked ``slow`` at collection (see ``conftest.py``).

The developer's quick run leaves them out (``python -m pytest -n 4 -m "not slow"``); CI,
and the README's full command, run every test. A test belongs here when it takes seconds
on a 2-core machine because of what it proves (real processes killed at random, a Dask
cluster, a stall window waited out, a sweep, hundreds of MiB), not because it sleeps to
beat a step. ``test_slow_tier.py`` checks that every name here still names a test.

Keys are file names under ``tests/``; values are test functions or classes (every
parametrization), or ``"*"`` for the whole file.
"""

from __future__ import annotations

import pytest

SLOW: dict[str, list[str]] = {
    # crash and chaos matrices: real processes killed at random, rounds of runs
    "test_backlog_crash.py": ["*"],
    "test_backlog_children_kill.py": ["*"],
    "test_backlog_store_matrix.py": ["*"],
    "test_backlog_dask_matrix.py": ["*"],
    "test_crash.py": ["test_sigkill_loses_no_acknowledged_event_and_leaves_at_most_a_torn_tail"],
    "test_storage_crash_states.py": ["*"],
    "test_langgraph_kill.py": ["*"],  # a LangGraph child killed at each boundary of a tool call, folder and s3
    "test_langgraph_model.py": ["*"],  # a LangGraph child killed around a ChatOpenAI call, folder and s3
    "test_bundle_leftovers.py": ["test_repeated_kills_never_accumulate_staging"],
    "test_http_sdks.py": ["test_killed_at_random_moments_never_pays_twice", "test_docs_examples_run_and_resume"],
    "test_pydantic_ai_kill.py": ["*"],  # an agent process (pydantic-ai imported) killed and re-run 3-4 times a case
    "test_pydantic_ai_docs.py": ["test_the_mailer_example_is_killed_refused_reconciled_and_completed_with_one_email"],
    "test_s3_gc_hazards.py": [
        "test_sigkill_mid_apply_leaves_a_store_that_verifies_and_a_rerun_finishes",
        "test_a_stalled_gc_taken_over_deletes_no_new_task",
        "test_a_stalled_gc_taken_over_does_not_delete_an_object_stored_again",
    ],
    # a worker holding many items killed and stopped (a stall waited out), a Dask cluster on a store
    "test_backlog_inflight.py": ["test_a_worker_holding_many_items_killed_or_stopped"],
    "test_backlog_inflight_store.py": ["test_dask_carries_batches_of_items_per_task_on_the_store"],
    # a Dask cluster started per test
    "test_backlog_dask.py": [
        "test_every_item_done_on_dask_one_receipt_per_key",
        "test_a_worker_killed_mid_effect_blocks_its_item_on_another_worker_never_a_second_send",
        "test_ctrl_c_to_the_process_group_lets_the_dask_workers_finish_the_effects_in_flight",
    ],
    "test_backlog_children_store.py": ["test_a_fan_out_on_the_store_runs_its_children_as_items"],
    "test_backlog_store.py": [
        "test_a_backlog_on_the_store_runs_every_item_once_on_either_engine",
        "test_a_fenced_holder_stopped_then_continued_cannot_append_or_send",
        "test_two_processes_on_one_item_task_one_wins_the_other_is_refused_and_waited_for",
    ],
    # waits out a lease's stall window on the store (seconds of real time are the subject)
    "test_backlog_store_add.py": ["*"],
    "test_backlog_store_scan.py": ["*"],
    # many processes racing on one key or stream
    "test_s3_fencing.py": [
        "test_32_racing_conditional_creates_on_one_key_have_exactly_one_winner",
        "test_32_racing_leases_of_one_stream_have_one_holder",
    ],
    "test_s3_ledger.py": ["test_two_processes_one_task_one_wins"],
    "test_s3_gc_after.py": ["test_a_backlog_whose_done_items_gc_retired_still_views_and_runs"],
    "test_stream_close_races.py": ["test_a_close_racing_appends_never_locks_the_process_out"],
    # sweeps: every forgery, every module, every example, the whole demo
    "test_bundle.py": [
        "test_both_verifiers_agree_on_every_forgery_of_a_sweep",
        "test_both_verifiers_agree_on_forgeries_of_the_newer_kinds",
        "test_the_naive_restart_of_the_seed_is_caught_by_both",
    ],
    "test_layers.py": [
        "test_every_module_imports_first_in_a_fresh_interpreter",
        "test_the_stale_check_fails_on_an_entry_that_no_longer_exists",
    ],
    "test_demo.py": ["*"],
    "test_adv_protocol_demo.py": ["test_demo_from_a_relative_folder_passes_every_claim"],
    "test_sessions.py": ["test_the_examples_in_docs_sessions_md_run"],
    "test_report_browser.py": ["*"],
    "test_stream_model.py": ["TestStreamModel"],  # stateful models: hundreds of steps each
    "test_s3_model.py": ["test_object_stream_model"],
    # large data: memory and time bounds measured on hundreds of MiB or thousands of tasks
    "test_streams.py": ["test_events_streams_a_200k_event_stream_in_bounded_memory"],
    "test_storage_lines.py": ["test_a_128_mib_line_is_read_in_linear_time"],
    "test_verify_memory.py": ["test_a_300_mib_store_verifies_in_bounded_memory"],
    "test_report.py": ["test_a_ledger_of_thousands_of_tasks_gives_a_small_page"],
    "test_cli_contract.py": ["test_export_of_300_tasks_prints_counts_and_human_sizes"],
    "test_views_cache.py": ["test_the_projection_from_the_cache_is_the_projection_of_a_full_read"],
    "test_views_flat.py": [
        "test_a_listing_ten_times_larger_takes_no_more_memory",
        "test_a_long_cell_past_the_first_rows_pushes_only_its_own_line",
        "test_gc_prints_the_bytes_the_whole_plan_would",
    ],
    "test_retention.py": ["test_gc_apply_keeps_every_needed_byte_and_equals_the_preview"],
}


def is_slow(item: pytest.Item) -> bool:
    """Whether a collected test is in the slow tier (by its function's name or the class it is in)."""
    names = SLOW.get(item.path.name)
    if not names:
        return False
    parent = item.parent if isinstance(item.parent, pytest.Class) else None
    return (
        "*" in names
        or getattr(item, "originalname", item.name) in names
        or (parent is not None and parent.name in names)
    )
