"""What mutation testing mutates and under which checks (:data:`TARGETS`), and the mutants no check
should see, each with the reason why (:data:`EQUIVALENT`): the data of ``course/authoring/mutation.py``.

Kept apart from the tool so that the tool's own row in the summary (it is one of its targets) goes stale only
when its code changes, not each time a target or an equivalence is added here. This file holds no function,
so mutmut finds nothing in it to mutate.
"""

from __future__ import annotations

#: The checks that call main and its pieces in the tests' process (those that start the program anew, mutmut
#: cannot see; the 3 prompts x 32 tokens against Hugging Face's add minutes a mutant and nothing these miss).
_MAIN_HERE = tuple(f"tests/test_programs.py::test_{name}" for name in (
    "bad_input_is_one_clear_line", "the_streamed_text_is_the_whole_text",
    "a_character_split_across_tokens_waits_for_its_last_byte", "padded_rows_are_never_drawn",
    "a_prompts_size_is_refused_from_its_bytes", "a_fault_blames_whose_code_it_is",
    "a_padded_vocabulary_is_never_generated", "main_quantized", "kib_keeps_a_small_caches_fraction",
    "main_compiles_what_was_asked", "interactive_prompts", "main_json_greedy_matches_hugging_face",
    "report_speed", "an_end_of_text_ends_the_text", "the_sampling_settings_reach_the_sampler",
    "device_gpu_without_one", "bad_checkpoints_are_one_clear_line", "gpt2_on_unfinished_steps_names_them",
    "a_llama_on_unfinished_steps_names_part_ii", "no_new_tokens_and_the_default_model",
    "main_names_a_learners_failing_step", "help_names_every_flag", "quantize_on_a_gpu_is_refused",
    "a_long_prompt_compiles_the_prefill_graph_once", "the_kernels_road_falls_back_to_step_15_saying_why",
    "a_decode_graph_that_does_not_compile_falls_back_to_step_15", "brackets_in_a_message_reach_the_learner_as_written"))

#: Each mutated file -> the tests that cover it (mutmut runs, per mutant, the ones that call its function).
TARGETS: dict[str, tuple[str, ...]] = {
    "course/checkpoints.py": ("tests/test_checkpoints.py", "tests/test_step_14_pretrained.py",
                              "tests/test_step_23_llama_pretrained.py", "tests/test_step_12_tokenizer.py"),
    "course/weights.py": ("tests/test_reference.py", "tests/test_checkpoints.py"),
    "course/programs/quantize.py": ("tests/test_quantize.py",),
    # the ✗ lines' words, on a scratch step file (the stubs' and planted bugs' checks reach hints.py only in the
    # child processes that course.check runs, which mutmut cannot see)
    "course/check/hints.py": ("tests/test_hints.py",),
    "course/check/runner.py": ("tests/test_runner.py",),
    "course/check/pytest_plugin.py": ("tests/test_pytest_plugin.py",),  # in a pytest run inside the test's
    "course/outline.py": ("tests/test_outline.py", "tests/test_pages.py"),
    "course/programs/generate.py": _MAIN_HERE,
    # the road every program takes to a compiled model: main's checks above, the runner each road builds, and the
    # quantized roads' own
    "course/programs/build.py": (*_MAIN_HERE, "tests/test_programs.py::test_the_road_builds_the_runner_asked_for",
                                 "tests/test_programs.py::test_the_road_refuses_a_llama_part_is_graphs",
                                 "tests/test_quantize.py"),
    # llama.cpp, bench's peer (the `llama` extra): its GGUF files and its generation, in the tests' process
    "course/programs/llama.py": tuple(f"tests/test_programs.py::test_{name}" for name in (
        "llama_cpp_on_the_same_checkpoint_gives_hugging_faces_tokens", "the_gguf_file_carries_the_checkpoints_tokenizer",
        "a_float16_checkpoint_is_written_as_float32", "the_gguf_file_is_the_same_under_an_ascii_locale",
        "llama_cpp_quantizes_without_its_log",
        "a_file_llama_cpp_cannot_quantize_is_one_line_with_its_reason", "bench_threads_are_the_cores_this_process_may_use",
        "llama_cpp_opens_the_context_bench_asks_for")),
    # what reaches it in the tests' process: the graph files, the eager executor, the kernels' build, the environment
    # of child processes, the huge pages, and a step's eager checks (to_numpy, from_numpy)
    "course/runtime.py": (*(f"tests/test_course.py::test_{name}" for name in (
        "a_graph_file_names_what_the_graph_computes", "the_graph_files_are_trimmed_oldest_first",
        "a_compiled_graph_loads_from_its_file_the_next_time", "eager_ops_run_on_the_interpreter_and_only_what_it_"
        "refuses_on_maxs_executor", "eager_ops_keep_an_executor_chosen_by_hand", "setup_prepares_max_once_per_process",
        "setup_installs_the_sigint_handler_that_makes_eager_ops_fast", "setup_leaves_maxs_poller_as_it_is_when_asked",
        "a_graph_runs_with_maxs_poller_idle_and_gives_it_back_its_policy",
        "find_max_poller_picks_a_thread_by_its_wakes_and_never_a_max_worker",
        "max_poller_idle_holds_the_poller_idle_until_the_last_graph_returns",
        "thread_wakes_reads_whole_names_and_passes_over_a_thread_that_ended",
        "a_graph_file_is_named_for_the_course_kernels_it_calls_not_where_maxs_libraries_lie",
        "what_a_graph_file_is_compiled_for_names_max_this_cpu_and_maxs_debug_settings",
        "max_cache_is_the_folder_max_reports", "to_numpy_gives_float32",
        "a_graph_file_is_kept_only_where_its_name_says_all_and_a_failed_export_changes_nothing")),
        *(f"tests/test_programs.py::test_{name}" for name in (
            "kernels_without_a_mojo_compiler_say_so", "a_child_process_gets_the_environment_python_holds",
            "weights_on_huge_pages_keep_their_values_in_one_advised_mapping", "kernels_compile_after_max_nn_is_imported")),
        "tests/test_step_05_token_embeddings.py", "tests/test_step_16_memory_limit.py::test_mojo_fused_ops_equal_numpy"),
    # bench's report and pictures in the tests' process (its paths' own processes, mutmut cannot see)
    "course/programs/bench.py": ("tests/test_bench.py", "tests/test_programs.py::test_roofline_labels_cover_no_point",
                                 "tests/test_programs.py::test_bench_says_which_signal_killed_a_path"),
    # the learner's stubs from the solutions: small solutions written by the checks, and the course's own
    "course/authoring/render.py": ("tests/test_render.py", *(f"tests/test_course.py::test_{name}" for name in (
        "steps_are_rendered_from_solutions", "a_learners_edits_are_edits_and_a_stale_stub_is_a_failure",
        "render_keeps_a_learners_edits"))),
    # the book's diagrams: every number of each drawing, against the files it wrote and the picture's bounds
    "course/authoring/diagrams.py": tuple(f"tests/test_book.py::test_{name}" for name in (
        "diagrams_are_current_and_shown", "each_diagram_holds_all_it_draws",
        "the_diagrams_command_writes_them_and_its_check_names_the_stale_ones")),
    # chapter 16's op profile: on canned logs and a stand-in child (its output is a measurement)
    "course/authoring/op_profile.py": ("tests/test_op_profile.py",),
    # chapter 16's one-op repro: its table on a small matrix, with a stand-in clock (its times are measurements)
    "course/authoring/one_row.py": ("tests/test_one_row.py",),
    # the pages' experiment and check outputs: on a small book of its own, with canned check runs (the real book's
    # experiments and checks run for minutes, in processes mutmut cannot see)
    "course/authoring/experiments.py": ("tests/test_experiments.py",),
    # the course's own small models: their text, windows, schedule and vocabulary, and whole runs on a small book
    # of its own (the real book's runs take minutes)
    "course/authoring/train.py": ("tests/test_train.py",),
    # this tool: on a small repository of its own, mutmut's run a stand-in (the checks that this summary is of
    # today's code are left out: a copy's summary has no line yet for what it is measuring)
    "course/authoring/mutation.py": tuple(f"tests/test_mutation.py::test_{name}" for name in (
        "the_digest_is_of_the_code_mutmut_mutates", "only_a_messages_words_are_set_aside",
        "status_names_each_targets_verdict_commit_and_whether_it_changed",
        "measured_at_is_the_commit_that_first_recorded_the_digest", "status_takes_each_targets_first_whole_row",
        "status_table_lines_up_its_columns_and_says_what_to_rerun",
        "a_solutions_todo_code_is_told_from_its_given_code", "writing_one_target_keeps_the_others_lines",
        "the_copy_holds_the_working_tree_and_mutmuts_settings_for_its_target",
        "a_solutions_copy_keeps_it_in_src_with_solutions_a_link_to_it",
        "the_mutants_are_mutmuts_each_with_its_lines_its_todo_and_why_it_is_equivalent",
        "a_change_of_several_lines_is_shown_as_one_with_its_parts",
        "a_run_hands_mutmut_the_mutants_not_set_aside_and_reads_its_verdicts",
        "last_reads_the_last_runs_verdicts_and_time_and_refuses_another_versions",
        "the_summary_counts_each_column_under_its_name_and_lists_what_is_explained_and_what_is_not",
        "the_recorded_digests_are_the_tables_first_line_for_each_target",
        "the_command_runs_the_targets_asked_prints_the_summary_and_each_survivor_and_writes_with_write",
        "help_names_the_command_and_each_option", "a_runs_time_is_in_whole_minutes_and_seconds",
        "without_mutmut_the_tool_says_what_to_install_and_stops",
        "each_function_and_method_is_found_at_its_def_line",
        "a_changed_line_is_found_in_an_async_or_decorated_function_and_a_diff_without_a_hunk_has_none",
        "outside_a_git_repository_the_copy_is_refused", "a_message_reworded_with_code_changed_after_it_is_not_set_aside")),
    "solutions/step_01_config.py": ("tests/test_step_01_config.py",),
    "solutions/step_02_causal_mask.py": ("tests/test_step_02_causal_mask.py",),
    **{f"solutions/{name}.py": (f"tests/test_{name}.py",) for name in (
        "step_03_layer_norm", "step_04_mlp", "step_05_token_embeddings", "step_06_position_embeddings",
        "step_07_attention", "step_08_residual", "step_09_block", "step_10_model", "step_11_lm_head")},
    "solutions/step_12_tokenizer.py": ("tests/test_step_12_tokenizer.py", "tests/test_checkpoints.py"),
    # and the one check of step 24 that compiles a Llama (Part II) with step 13's compile_next_logits
    "solutions/step_13_generation.py": ("tests/test_step_13_generation.py",
                                        "tests/test_step_24_llama_cache.py::test_greedy_with_the_cache_matches_without_it"),
    "solutions/step_14_pretrained.py": ("tests/test_step_14_pretrained.py", "tests/test_checkpoints.py"),
    "solutions/step_15_kv_cache.py": ("tests/test_step_15_kv_cache.py",),
    "solutions/step_16_memory_limit.py": ("tests/test_step_16_memory_limit.py",  # and the quantized kernel roads
                                          "tests/test_quantize.py::test_the_kernel_road_gives_the_cached_q4_0_logits",
                                          "tests/test_quantize.py::test_the_fused_kernel_road_gives_the_rounded_models_logits"),
    # step 16's given machinery, which the step's checks and the quantized kernel roads run
    "course/decoding.py": ("tests/test_step_16_memory_limit.py",
                           "tests/test_quantize.py::test_the_kernel_road_gives_the_cached_q4_0_logits",
                           "tests/test_quantize.py::test_the_fused_kernel_road_gives_the_rounded_models_logits"),
    # Part III's machinery, in the tests' process (the servers the `serve` checks start run it where mutmut cannot see)
    # the front door: every bad request's status and message, a good one let through, the chapter's table
    "course/programs/front.py": tuple(f"tests/test_serve.py::test_{name}" for name in (
        "the_front_door_refuses_a_bad_completion_with_its_reason",
        "the_front_door_lets_a_good_completion_through_and_refuses_chat",
        "the_chapters_table_of_bad_requests_is_what_the_door_answers",
        "the_door_answers_a_bad_request_itself_and_forwards_the_rest_unchanged",
        "the_door_waits_as_long_as_max_takes_and_lets_go_when_its_client_does")),
    # serve: the served copy of a folder, the command and environment it starts, its refusals, its wait
    "course/programs/serve.py": tuple(f"tests/test_serve.py::test_{name}" for name in (
        "the_served_copy_is_float32_with_the_same_numbers_and_tokens_written_once",
        "a_changed_checkpoint_gets_a_copy_of_its_own",
        "the_command_listens_on_this_machine_with_batching_on_and_telemetry_off",
        "max_serve_runs_offline_without_metrics_unless_the_user_asks_for_them",
        "the_learners_gpt2_is_served_from_their_folder", "serve_refuses_in_one_line",
        "a_server_that_exits_early_is_said_and_one_that_never_answers_times_out",
        "a_copy_keeps_whole_numbers_reads_a_hub_tokenizer_and_outlives_a_start_cut_short",
        "main_starts_max_behind_the_door_and_stops_it_whatever_happens",
        "serve_finds_max_beside_its_python_then_on_path", "serve_help_names_each_flag_and_refuses_a_wrong_choice",
        "the_wait_for_max_ends_when_health_answers_and_never_hangs_on_a_silent_one",
        "the_served_copies_live_in_the_users_cache_or_where_course_serve_cache_says",
        "the_door_knows_the_served_models_name_vocabulary_context_and_tokenizer",
        "stop_ends_the_server_and_every_process_it_started_even_one_that_ignores_sigterm",
        "a_server_keeps_its_temporary_files_in_a_folder_of_its_own_which_stop_removes",
        "the_door_closes_when_maxs_server_exits_and_says_so")),
    # bench --serve: its servers, its medians and its report, the servers faked; where llama.cpp's server is found
    "course/programs/serve_bench.py": tuple(f"tests/test_serve.py::test_{name}" for name in (
        "bench_serve_counts_what_the_clients_got_and_times_only_after_the_warm_up",
        "bench_serve_starts_each_server_once_a_round_and_reports_medians",
        "bench_serve_reports_every_server_and_llama_cpps_settings")),
    "course/programs/llama_server.py": (
        "tests/test_serve.py::test_bench_finds_llama_server_where_it_looks_and_says_how_to_build_one",
        "tests/test_serve.py::test_llama_server_build_fetches_the_releases_source_builds_the_one_program_and_says_"
        "what_failed",
        "tests/test_serve.py::test_bench_serve_reports_every_server_and_llama_cpps_settings"),
    "solutions/step_17_llama_config.py": ("tests/test_step_17_llama_config.py",),
    **{f"solutions/{name}.py": (f"tests/test_{name}.py",) for name in (
        "step_18_rms_norm", "step_19_rope", "step_20_swiglu", "step_21_gqa", "step_22_llama_model",
        "step_23_llama_pretrained", "step_24_llama_cache", "step_25_serving", "step_26_serving_llama")},
}

_CK = "course/checkpoints.py"
_UTF8_NAME = "a codec's name is case-insensitive: 'UTF-8' is 'utf-8'"
_ANY_REPO = ("the probe asks only whether the Hub answers, and any HTTP answer counts (404 for a repository it does "
             "not know included): the repository in its URL changes nothing")
_ANY_METHOD = ("any HTTP answer counts, and the Hub answers GET (a small config.json) and a method it does not "
               "know (an error status) as it answers HEAD")
_JOIN = ("join(timeout) bounds the wait whatever urlopen's own time-out: the same message at the same time; the "
         "probe thread, a daemon, ends unseen")
_DAEMON = ("the probe thread ends with urlopen's time-out as join gives up; only a name lookup that hangs past it "
           "(which ignores time-outs) would keep a non-daemon thread, and so the program's exit, waiting")
_CAP = "one more character of huggingface_hub's error, quoted after the names and values that matter: the line stays one line"

_GEN = "course/programs/generate.py"
_MILLIONS = "millions = sum(v.size for v in pretrained.state.values()) / 1e6"
_FULL = "full = per_token * config.num_attention_heads // config.num_key_value_heads"
_JSON = "print(json.dumps(result, ensure_ascii=False))"
_PATH = 'sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() not in (SOLUTIONS, STEPS, steps_dir.resolve())]'
_ONLY_FOLDER = ("every step the program imports is a file of the folder (unfinished() refuses a folder missing one, "
                "before any import), and sys.path's first entry, the course's root or the program's, holds none: no "
                "import can reach another folder's steps")
_SEED = 'p.add_argument("--seed", type=int, default=None, help="the random seed: the same seed gives the same text")'
_LONGEST = "self.longest_token = max(map(len, vocab), default=0) or None"
#: The programs' main (course/programs/generate.py).
_GENERATE = {
    (_GEN, "xǁGeneratorǁcompile", _MILLIONS, _MILLIONS.replace("1e6", "1000001.0")):
        "a millionth part of the count, under the message's rounding to whole millions",
    (_GEN, "xǁGeneratorǁcompile", _FULL, _FULL.replace(" // ", " / ")):
        "num_attention_heads is a multiple of num_key_value_heads (step 17 refuses others): / and // give one number",
    (_GEN, "xǁGeneratorǁeos_id", 'return getattr(self.tokenizer, "eot_id", None)',
     'return getattr(self.tokenizer, "eot_id", )'):
        "step 12's Tokenizer always sets eot_id (one built from a vocabulary without <|endoftext|> raises a KeyError): "
        "the default is never read",
    (_GEN, "xǁGeneratorǁ__init__", 'vocab = getattr(self.tokenizer, "encoder", None) or {}',
     'vocab = getattr(self.tokenizer, "encoder", ) or {}'):
        "step 12's Tokenizer always has its encoder (the vocabulary it is built from): the default is never read",
    **{(_GEN, "xǁGeneratorǁ__init__", _LONGEST, _LONGEST.replace("default=0", after)):
       "the tokenizer's vocabulary is never empty (it holds <|endoftext|> at least): max's default is never read"
       for after in ("default=None", "default=1", "")},
    **{(_GEN, function, _JSON, _JSON.replace("ensure_ascii=False", "ensure_ascii=None")):
       "json.dumps reads ensure_ascii as a truth value: None is False" for function in ("x_main", "x_interactive")},
    **{(_GEN, "x_import_steps", _PATH, after): _ONLY_FOLDER for after in (
        _PATH.replace('Path(p or ".")', 'Path(p and ".")'), _PATH.replace('Path(p or ".")', 'Path(p or "XX.XX")'))},
    (_GEN, "x_import_steps", "sys.path.insert(0, str(folder))", "sys.path.insert(1, str(folder))"): _ONLY_FOLDER,
    (_GEN, "x_import_steps", "path = step_path(number, SOLUTIONS)", "path = step_path(number, )"):
        "step_path's folder defaults to SOLUTIONS",
    (_GEN, "x_parser", _SEED, _SEED.replace("default=None, ", "")): "argparse's default for a flag not given is None",
    (_GEN, "xǁGeneratorǁrun", "write = (lambda piece: None) if a.json else show",
     "write = (lambda piece: 0) if a.json else show"): "what write returns is never read",
}

_QZ = "course/programs/quantize.py"
_SC = "sc = np.clip(np.round(_ratio(scale, d.astype(np.float32))), 0, 63).astype(np.uint8)"
_MN = "mn = np.clip(np.round(_ratio(mins, dmin.astype(np.float32))), 0, 63).astype(np.uint8)"
_STEP = "step, offset = (d.astype(np.float32) * sc)[..., None], (dmin.astype(np.float32) * mn)[..., None]"
_IN_RANGE = "the ratio to the largest over 63 rounds to 0..63 by construction (d and dmin are it): the clip never binds"
_F64 = "astype(None) is float64: the same levels, from the same float16 d and dmin, with wider intermediate products"
#: q4_k's quantizer (course.programs.quantize._q4_k): what tests/test_quantize.py's extremes check cannot see.
_Q4K = {
    **{(_QZ, "x__q4_k", f"{name} = (s.max(-1, keepdims=True) / 63).astype(np.float16)".replace("s.max", f"{of}.max"),
        f"{name} = (s.max(+1, keepdims=True) / 63).astype(np.float16)".replace("s.max", f"{of}.max")):
       f"{of} is [rows, 8]: axis +1 is axis -1" for name, of in (("d", "scale"), ("dmin", "mins"))},
    **{(_QZ, "x__q4_k", line, line.replace(", 0, 63)", bounds)): _IN_RANGE
       for line in (_SC, _MN) for bounds in (", None, 63)", ", 0, None)", ", 0, 64)")},
    (_QZ, "x__q4_k", _SC, _SC.replace(", 0, 63)", ", 1, 63)")):
        "only a sub-block narrower than half of d gets 0 steps: then its values come back at its min, within d of "
        "themselves, and with 1 step of d, within d/2: inside the format's rounding either way",
    (_QZ, "x__q4_k", _MN, _MN.replace(", 0, 63)", ", 1, 63)")):
        "only a sub-block that reaches less than dmin/2 below zero gets min 0: with 1 its levels shift down by dmin (a "
        "63rd of the block's deepest min), and its values stay within the format's rounding of a level",
    (_QZ, "x__q4_k", _SC, _SC.replace("d.astype(np.float32)", "d.astype(None)")): _F64,
    (_QZ, "x__q4_k", _MN, _MN.replace("dmin.astype(np.float32)", "dmin.astype(None)")): _F64,
    (_QZ, "x__q4_k", _STEP, _STEP.replace("(d.astype(np.float32)", "(d.astype(None)")): _F64,
    (_QZ, "x__q4_k", _STEP, _STEP.replace("(dmin.astype(np.float32)", "(dmin.astype(None)")): _F64,
}

_Q6_SC = "sc = np.clip(np.round(_ratio(scale, d.astype(np.float32))), -128, 127).astype(np.int8)"
_Q6_TOP = "top = np.take_along_axis(scale, np.abs(scale).argmax(-1)[..., None], -1)"
_Q6_PEAK = "peak = np.take_along_axis(sub, np.abs(sub).argmax(-1)[..., None], -1)[..., 0]"
#: The oldest NumPy the course allows (pyproject.toml and pixi.toml: tests/test_mutation.py compares them).
NUMPY_FLOOR = (2, 3)
_AXIS = ("NumPy 2.3 and later, all the course allows (NUMPY_FLOOR), take axis -1 when take_along_axis is given none "
         "(an older NumPy raised a TypeError)")
_ZEROS = "np.zeros(np.broadcast(a, b).shape, dtype=np.float32)"
_WIDE = "out = " + _ZEROS
#: q6_k's quantizer and the division it shares with q4_k's: what tests/test_quantize.py's extremes checks cannot see.
_Q6K = {
    (_QZ, "x__q6_k", _Q6_TOP, _Q6_TOP.replace("argmax(-1)", "argmax(+1)")): "scale is [rows, 16]: axis +1 is axis -1",
    (_QZ, "x__q6_k", _Q6_TOP, _Q6_TOP.replace("None], -1)", "None], +1)")): "scale is [rows, 16]: axis +1 is axis -1",
    (_QZ, "x__q6_k", _Q6_TOP, _Q6_TOP.replace("None], -1)", "None], )")): _AXIS,
    (_QZ, "x__q6_k", _Q6_PEAK, _Q6_PEAK.replace("None], -1)", "None], )")): _AXIS,
    **{(_QZ, "x__q6_k", _Q6_SC, _Q6_SC.replace("-128, 127)", bounds)):
       "d is the largest scale over -128, so that scale's ratio rounds to -128 (float16's rounding of d moves it by "
       "less than 0.1) and every other ratio is smaller: the lower bound never binds" for bounds in ("None, 127)", "-129, 127)")},
    (_QZ, "x__q6_k", _Q6_SC, _Q6_SC.replace("d.astype(np.float32)", "d.astype(None)")): _F64,
    (_QZ, "x__q6_k", "q = np.round(_ratio(sub, (d.astype(np.float32) * sc)[..., None]))",
     "q = np.round(_ratio(sub, (d.astype(None) * sc)[..., None]))"): _F64,
    **{(_QZ, "x__ratio", _WIDE, "out = " + _ZEROS.replace(", dtype=np.float32)", after)):
       "float64 quotients of the same float32 numbers: a level moves only where a quotient lies within float32's "
       "rounding of a half-way point, and the scales are float16 anyway" for after in (", dtype=None)", ", )")},
    **{(_QZ, "x__ratio", _WIDE, _WIDE.replace("(a, b)", after)):
       "every call's numerator already has the broadcast shape (sub-blocks against their scales, scales against d)"
       for after in ("(a, None)", "(a, )")},
    **{(_QZ, "x_quantize_rows", "w = np.ascontiguousarray(w, dtype=np.float32)", f"w = np.ascontiguousarray(w, {after})"):
       "every caller hands float32 rows (QuantizedLinear's padded copy); float64 ones pack to the same bytes "
       "(measured on 40 Gaussian rows in each format): the cast only narrows a wider copy" for after in ("dtype=None", "")},
    (_QZ, "x_quantize_rows", "blocks = w.reshape(-1, 256)", "blocks = w.reshape(-2, 256)"): "NumPy infers any negative size",
    (_QZ, "x_quantize_rows", "return packed.reshape(w.shape[0], -1)", "return packed.reshape(w.shape[0], -2)"):
        "NumPy infers any negative size",
    **{(_QZ, "xǁQuantizedLinearǁ__init__", "padded = np.zeros((-(-weight.shape[0] // ROWS) * ROWS, weight.shape[1]), np.float32)",
        f"padded = np.zeros((-(-weight.shape[0] // ROWS) * ROWS, weight.shape[1]), {after}"):
       "quantize_rows reads the padded rows as float32, and zeros and float32 weights are exact in float64"
       for after in ("None)", ")")},
    (_QZ, "x_held_out", 'text = (own if own.is_file() else COURSE_MODEL / "heldout.txt").read_text(encoding="utf-8")',
     'text = (own if own.is_file() else COURSE_MODEL / "heldout.txt").read_text(encoding="UTF-8")'): _UTF8_NAME,
    (_QZ, "x_held_out", 'text = (own if own.is_file() else COURSE_MODEL / "heldout.txt").read_text(encoding="utf-8")',
     'text = (own if own.is_file() else COURSE_MODEL / "heldout.txt").read_text(encoding=None)'):
        "None is the locale's encoding: UTF-8 on Linux and macOS, and in a C locale too (Python's UTF-8 mode, PEP "
        "540)",
    (_QZ, "x_log_probs", "z = logits.astype(np.float64) - logits.max()", "z = logits.astype(None) - logits.max()"):
        "NumPy reads the dtype None as float64: the same array",
}

_SYMBOL = "a symbolic dimension's name is only a name: one graph serves every length alike"
_INT64 = ("the ids are Python ints, which NumPy 2 makes int64 on every 64-bit platform (an empty prompt, which would be "
          "float64, is refused before by check_lengths)")
_S13 = "solutions/step_13_generation.py"
_FILTER = "def filter_logits(logits: np.ndarray, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:"
_TOP_K, _TOP_P = "if 0 < top_k < logits.size:", "if top_p < 1:"
_COMPILE = 'run = LastPositionLogits(model).compile(TensorType(DType.int64, [1, "seq"], device))'
_IDS = "logits = run(Tensor.from_dlpack(np.asarray([ids], dtype=np.int64)).to(device))"
_AT_ONE = ("check_sampling lets top_p reach 1 at most, where the filter cuts only a tail whose whole probability is "
           "within the running total's rounding (under 1e-11 for GPT-2's 50,257 tokens): no draw can tell")
_NOTHING_BELOW = "at that top_k the k-th largest is the smallest logit, and nothing lies below it: nothing is cut, as with the filter off"
#: Step 13's given code and TODO code (solutions/step_13_generation.py).
_STEP_13 = {
    (_S13, "x_check_sampling", "smallest = float(np.finfo(np.float32).max / np.finfo(np.float64).max)  # ≈ 1.9e-270",
     "smallest = float(np.finfo(np.float32).max / np.finfo(None).max)  # ≈ 1.9e-270"):
        "NumPy reads the dtype None as float64: the same bound",
    (_S13, "x_filter_logits", _FILTER, _FILTER.replace("top_p: float = 1.0", "top_p: float = 2.0")):
        "filter_logits cuts by top-p only below 1 (check_sampling refuses more): a default of 2, like 1, leaves it off",
    (_S13, "x_filter_logits", _TOP_K, "if 0 <= top_k < logits.size:"): _NOTHING_BELOW,
    (_S13, "x_filter_logits", _TOP_K, "if 0 < top_k <= logits.size:"): _NOTHING_BELOW,
    (_S13, "x_filter_logits", _TOP_P, "if top_p <= 1:"): _AT_ONE,
    (_S13, "x_filter_logits", _TOP_P, "if top_p < 2:"): _AT_ONE,
    (_S13, "x_filter_logits", 'order = np.argsort(-logits, kind="stable")', 'order = np.argsort(-logits, kind="STABLE")'):
        "NumPy reads a sort kind by its first letter, in either case: 'STABLE' is 'stable'",
    **{(_S13, "x_compile_next_logits", _COMPILE, _COMPILE.replace('"seq"', name)): _SYMBOL
       for name in ('"XXseqXX"', '"SEQ"')},
    **{(_S13, "x_compile_next_logits", _IDS, _IDS.replace("dtype=np.int64", after)): _INT64
       for after in ("dtype=None", "")},
}

_S15 = "solutions/step_15_kv_cache.py"
_KV = 'self.kv = TensorType(DType.float32, [1, heads, "past", head_dim], self.device)'
_SEQ = 'ids = TensorType(DType.int64, [1, "seq"], self.device)'
_NEW = "new_ids = Buffer.from_numpy(np.asarray([new], dtype=np.int64)).to(self.device)"
#: Step 15's given code and TODO code (solutions/step_15_kv_cache.py).
_STEP_15 = {
    **{(_S15, "xǁCachedNextLogitsǁ__init__", line, line.replace(f'"{name}"', after)): _SYMBOL
       for line, name in ((_KV, "past"), (_SEQ, "seq")) for after in (f'"XX{name}XX"', f'"{name.upper()}"')},
    **{(_S15, "xǁCachedNextLogitsǁ__call__", _NEW, _NEW.replace("dtype=np.int64", after)): _INT64
       for after in ("dtype=None", "")},
    (_S15, "xǁCachedSelfAttentionǁmask", "return F.concat([F.zeros([seq_len, past_len]), causal_mask(seq_len, 0)], axis=1)",
     "return F.concat([F.zeros([seq_len, past_len]), causal_mask(seq_len, )], axis=1)"):
        "causal_mask's past_len defaults to 0: the same mask",
}

_S16 = "solutions/step_16_memory_limit.py"
_DEC = "course/decoding.py"  # step 16's given machinery
_EPS = "eps = F.constant([norm.eps], DType.float32, weight.device)"
_ROWS = "w @ w[0]  # the matrix times one of its rows: float32 throughout"
_NO_BIAS = "no_bias = F.zeros([wte.shape[0]], dtype=wte.dtype, device=wte.device)"
_NO_GPU = ("a device of None is MAX's default, the CPU, which is the device every check here runs on: only a "
           "GPU machine could tell them apart")
_CPU_ONLY = ("the fused kernels run on the CPU only, where a new tensor's default dtype is float32 and its default "
             "device the CPU (runtime.setup): the same tensor")
_PREFILL = "super().__init__(self.model, self.config, self.device)"
_DECODE_ROWS = 'rows = kind(self.cache_dtype, ["rows", heads, head_dim], self.device)'
_BLOCK_EPS = "eps = F.constant([block.ln_1.eps], DType.float32, x.device)"
_BLOCK_OUT = "[TensorType(DType.float32, [1, x.shape[-1]], device)],"
_NEW_ID = "new_id = Buffer.from_numpy(np.asarray([ids[-1:]], dtype=np.int64)).to(self.device)"
#: Step 16's given code (solutions/step_16_memory_limit.py, and course/decoding.py).
_STEP_16 = {
    **{(_DEC, "x_norm_one_row_kernel", _EPS, after): _CPU_ONLY for after in (
        _EPS.replace("DType.float32", "None"), _EPS.replace("weight.device", "None"),
        _EPS.replace("weight.device", ""))},
    (_S16, "x_attend_in_place", "scores = F.concat([(past_k * q).sum(-1), (k * q).sum(-1)], axis=0) * scale",
     "scores = F.concat([(past_k * q).sum(-1), (k * q).sum(-1)], ) * scale"):
        "F.concat's axis defaults to 0: the same scores",
    **{(_DEC, "xǁKernelDecodingǁdecode", _NO_BIAS, after): _CPU_ONLY for after in (
        _NO_BIAS.replace("dtype=wte.dtype", "dtype=None"), _NO_BIAS.replace("device=wte.device", "device=None"),
        _NO_BIAS.replace("dtype=wte.dtype, ", ""), _NO_BIAS.replace("device=wte.device", ""))},
    **{(_DEC, "x_block_kernel", _BLOCK_EPS, after): _CPU_ONLY for after in (
        _BLOCK_EPS.replace("DType.float32", "None"), _BLOCK_EPS.replace("x.device", "None"),
        _BLOCK_EPS.replace("x.device", ""))},
    (_DEC, "x_block_kernel", _BLOCK_OUT, _BLOCK_OUT.replace("x.shape[-1]", "x.shape[+1]")):
        "decode hands block_kernel x as [1, C]: its axis 1 is its last",
    (_S16, "xǁDecodeGPT2LMHeadModelǁ__init__",
     "setattr(module, name, self.linear(in_dim, out_dim, bias=not isinstance(child.bias, int)))",
     "setattr(module, name, self.linear(in_dim, out_dim, ))"):
        "every Linear of GPT-2 has a bias, which Linear's default gives",
    **{(_DEC, "xǁCacheInPlaceǁ__init__", line, line.replace("device=self.device", after)): _NO_GPU
       for line in (f"self.{cache}_cache = [Buffer.zeros(shape, self.cache_dtype, device=self.device) for _ in range(layers)]"
                    for cache in ("key", "value"))
       for after in ("device=None", "")},
    **{(_DEC, "xǁCacheInPlaceǁprefill_graph", _PREFILL, _PREFILL.replace("self.device", after)): _NO_GPU
       for after in ("None", "")},
    **{(_DEC, "xǁCacheInPlaceǁdecode_graph", _DECODE_ROWS, _DECODE_ROWS.replace('"rows"', after)): _SYMBOL
       for after in ('"XXrowsXX"', '"ROWS"')},
    (_DEC, "xǁCacheInPlaceǁdecode_graph", "kind = BufferType if self.writes_cache else TensorType",
     "kind = BufferType if (self.writes_cache) or True else TensorType"):
        "a model that only reads its cache (the learner's, which returns its new rows) gives the same numbers from "
        "buffer inputs, which MAX's own ops load before they read them: a cost in time, which bench shows, not in "
        "numbers",
    **{(_DEC, "xǁCacheInPlaceǁstep", _NEW_ID, _NEW_ID.replace("dtype=np.int64", after)): _INT64
       for after in ("dtype=None", "")},
    (_DEC, "x_measure_bandwidth", _ROWS, _ROWS.replace("w[0]", "w[1]")):
        "every row of the matrix is ones: any row is the same vector",
}

_S12 = "solutions/step_12_tokenizer.py"
_WORD = 'word = "".join(self.byte_encoder[byte] for byte in piece.encode("utf-8"))'
_TEXT = 'return data.decode("utf-8", errors="replace")'
#: Step 12's TODO code (solutions/step_12_tokenizer.py).
_STEP_12 = {
    (_S12, "xǁTokenizerǁencode_piece", _WORD, _WORD.replace('"utf-8"', '"UTF-8"')): _UTF8_NAME,
    (_S12, "xǁTokenizerǁdecode", _TEXT, _TEXT.replace('"utf-8"', '"UTF-8"')): _UTF8_NAME,
    (_S12, "xǁTokenizerǁdecode", _TEXT, 'return data.decode(errors="replace")'):
        "bytes.decode reads UTF-8 when given no encoding, whatever the locale",
}

_S02 = "solutions/step_02_causal_mask.py"
_BAND = "return F.band_part(mask, num_lower=None, num_upper=past_len, exclude=True)"
_S03 = "solutions/step_03_layer_norm.py"
_VAR = "var = F.mean((x - mean) * (x - mean), axis=-1)"
#: Step 03's TODO code (solutions/step_03_layer_norm.py).
_STEP_03 = {
    (_S03, "xǁLayerNormǁforward", line, line.replace(", axis=-1)", ", )")):
        "F.mean's axis defaults to -1, the last: the same mean" for line in ("mean = F.mean(x, axis=-1)", _VAR)}

_S07 = "solutions/step_07_attention.py"
_SCORES = "scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)"
_S18, _S19 = "solutions/step_18_rms_norm.py", "solutions/step_19_rope.py"
_FREQ = "frequencies = 1.0 / theta ** (F.arange(0, head_dim, 2, dtype=DType.float32) / head_dim)"
_POS = "positions = F.arange(past_len, past_len + seq_len, dtype=DType.float32)"
_FLOAT32 = "F.arange's dtype defaults to the default dtype, which the course sets to float32 (course.runtime.setup)"
#: Steps 18 and 19's TODO code (solutions/step_18_rms_norm.py, solutions/step_19_rope.py).
_STEPS_18_19 = {
    (_S18, "xǁRMSNormǁforward", "mean_square = F.mean(x * x, axis=-1)", "mean_square = F.mean(x * x, )"):
        "F.mean's axis defaults to -1, the last: the same mean",
    **{(_S19, "x_rope_tables", line, line.replace("dtype=DType.float32", after)): _FLOAT32
       for line in (_FREQ, _POS) for after in ("dtype=None", "")},
    (_S19, "x_rope_tables", "angles = F.concat([angles, angles], axis=-1)", "angles = F.concat([angles, angles], axis=+1)"):
        "angles is [tokens, head_dim / 2]: axis +1 is axis -1",
}

_S20 = "solutions/step_20_swiglu.py"
_S21, _S22 = "solutions/step_21_gqa.py", "solutions/step_22_llama_model.py"
_NO_BIAS = "MAX's Linear reads bias as a truth value: None is False, and the layer has no bias alike"
#: Steps 20 to 22's TODO code (solutions/step_20_swiglu.py, step_21_gqa.py, step_22_llama_model.py).
_STEPS_20_22 = {
    (_S22, "xǁLlamaForCausalLMǁ__init__", "self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)",
     "self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=None)"): _NO_BIAS,
    **{(_S20, "xǁLlamaMLPǁ__init__", f"self.{name} = Linear({sizes}, bias=False)",
        f"self.{name} = Linear({sizes}, bias=None)"): _NO_BIAS
       for name, sizes in (("gate_proj", "config.hidden_size, config.intermediate_size"),
                           ("up_proj", "config.hidden_size, config.intermediate_size"),
                           ("down_proj", "config.intermediate_size, config.hidden_size"))},
    **{(_S21, "xǁLlamaAttentionǁ__init__", f"self.{name} = Linear({sizes}, bias=False)",
        f"self.{name} = Linear({sizes}, bias=None)"): _NO_BIAS
       for name, sizes in (("q_proj", "config.hidden_size, self.n_head * self.head_dim"),
                           ("k_proj", "config.hidden_size, self.n_kv_head * self.head_dim"),
                           ("v_proj", "config.hidden_size, self.n_kv_head * self.head_dim"),
                           ("o_proj", "self.n_head * self.head_dim, config.hidden_size"))},
    (_S21, "xǁLlamaAttentionǁrepeat_kv", "copies = F.concat([copies] * groups, axis=2)",
     "copies = F.concat([copies] * groups, axis=3)"):
        "after the new axis of size 1, copies joined along the tokens lie in memory as along that axis: the reshape "
        "to [B, H, T, D] gives the same heads",
}

_S25 = "solutions/step_25_serving.py"
_ROW = "row = F.sum(F.cast(ended, DType.int64), axis=-1).reshape([-1])"
_QKV_25 = ("q, k, v = (t.reshape([-1, self.n_head, self.head_dim]) for t in F.split(self.c_attn(x), "
           "[self.n_embd] * 3, axis=-1))")
#: Step 25's TODO code (solutions/step_25_serving.py; step 26's has no equivalent mutant).
_STEP_25 = {
    (_S25, "x_ragged_positions", _ROW, _ROW.replace("axis=-1", "")):
        "F.sum's axis defaults to -1, the sequences: the same counts",
    (_S25, "x_ragged_positions", _ROW, _ROW.replace("axis=-1", "axis=+1")):
        "ended is [N, B]: axis +1 is its last, the sequences",
    (_S25, "xǁPagedSelfAttentionǁforward", _QKV_25, _QKV_25.replace("axis=-1", "axis=+1")):
        "c_attn's output is [N, 3C], no batch axis: axis +1 is its last",
}

_FRONT = "course/programs/front.py"
_QUOTED = 'raise Refusal(f"prompt {json.dumps(prompt)[:80]}: it must be a text or a list of token ids", "prompt")'
_MANY = "if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt):"
_HEADERS = ('headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length",')
_METHODS = 'methods = ["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD"]'
_STARLETTE = 'return Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)'
_DISCONNECT = 'while (await request.receive())["type"] != "http.disconnect":'
_GONE = "return Response(status_code=499)"
#: The front door's (course/programs/front.py).
_FRONT_DOOR = {
    (_FRONT, "x__prompt_tokens", _QUOTED, _QUOTED.replace("[:80]", "[:81]")):
        "how much of a wrong prompt the message quotes, 80 characters or 81: one line either way",
    (_FRONT, "x__prompt_tokens", _MANY, _MANY.replace("len(prompt) > 1", "len(prompt) >= 1")):
        "a list of one text or one list returned on the line before: what reaches this one holds more, or no text",
    **{(_FRONT, "x_app", _HEADERS, _HEADERS.replace('"content-length"', after)):
       "the body goes on as it was read, so a client's own Content-Length is the length httpx sets"
       for after in ('"XXcontent-lengthXX"', '"CONTENT-LENGTH"')},
    **{(_FRONT, "x_app", _METHODS, _METHODS.replace(f'"{name}"', f'"{name.lower()}"')):
       "Starlette's Route reads its methods in upper case" for name in ("GET", "POST", "PUT", "DELETE", "OPTIONS")},
    **{(_FRONT, "x_app", _METHODS, _METHODS.replace('"HEAD"', after)): "Starlette's Route adds HEAD wherever GET is"
       for after in ('"XXHEADXX"', '"head"')},
    **{(_FRONT, "x_app", _STARLETTE, _STARLETTE.replace("lifespan=lifespan", after)):
       "the client to MAX's server closes with the door's process, which ends when its server does (serve.main)"
       for after in ("lifespan=None", "")},
    **{(_FRONT, "x__unless_hung_up", _DISCONNECT, _DISCONNECT.replace('["type"]', after)):
       "the body is read before the watch starts, so the next message is the hang-up: its KeyError ends the watch as "
       "its type does, and logs nothing (the hang-up check's log stays empty)"
       for after in ('["XXtypeXX"]', '["TYPE"]')},
    (_FRONT, "x_app", _GONE, _GONE.replace("499", "500")):
        "the client has hung up: no one reads the status, and the door logs no access lines (log_level warning)",
}

_SERVE = "course/programs/serve.py"
_BLOCK = "while block := handle.read(1 << 24):"
_KEY = "return digest.hexdigest()[:16]"
_READ_CONFIG = 'config = json.loads((checkpoint.folder / checkpoints.CONFIG).read_text(encoding="utf-8"))'
_WRITE_CONFIG = '(partial / checkpoints.CONFIG).write_text(json.dumps(config, indent=2) + "\\n", encoding="utf-8")'
_HEALTH = 'with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:'
_WAITING = "while time.perf_counter() - started < timeout:"
_READY = ('def ready(url: str, process: subprocess.Popen | None = None, timeout: float = 900.0, name: str = "max serve")'
          ' -> float:')
_UVICORN_LOG = 'log_level="warning"))'
_WATCH = "threading.Thread(target=watch, daemon=True).start()"
_ANSWERS_AT = 'f"{seconds:.0f} s; Ctrl-C stops it", flush=True)'
_EXITED = 'print(f"serve: MAX\'s server exited with code {process.returncode}", file=sys.stderr, flush=True)'
_SAID = "print(f\"serve: {' '.join(run)}\", flush=True)"
_UTF8_HERE = ("the locale's encoding is UTF-8 here, on CI and on macOS (and Python's in a C locale, PEP 538): only a "
              "config.json with text beyond ASCII in a Latin-1 locale would tell")
_SERVED_CONFIG = _READ_CONFIG.replace("checkpoint.folder", "folder")
_CODECS = (("x_prepare", _READ_CONFIG), ("x_prepare", _WRITE_CONFIG), ("x_served", _SERVED_CONFIG))
_PIPED = ("when a line reaches a pipe, not what it says: the served checks, which read serve's output from a pipe "
          "while it runs, run it in processes mutmut cannot see")
_FLUSHED = (("x_front_door", _ANSWERS_AT), ("x_front_door", _EXITED), ("x_main", "flush=True)"), ("x_main", _SAID))
#: serve's (course/programs/serve.py).
_SERVE_PROGRAM = {
    **{(_SERVE, function, line, line.replace("ignore_errors=True", after)):
       "the folder is there and nothing holds it: removed alike, and nothing to ignore"
       for function, line in (("x_start", "shutil.rmtree(scratch, ignore_errors=True)"),
                              ("x_stop", "shutil.rmtree(process.scratch, ignore_errors=True)"))
       for after in ("ignore_errors=None", "", "ignore_errors=False")},
    (_SERVE, "x_stop", 'if getattr(process, "scratch", None):', 'if getattr(process, "scratch", ):'):
        "every process stop() is given comes from start(), which sets its scratch folder",
    (_SERVE, "x_stop", "def stop(process: subprocess.Popen, grace: float = 60.0) -> None:",
     "def stop(process: subprocess.Popen, grace: float = 61.0) -> None:"):
        "a second more on a limit of 60 s that a server ending on its SIGTERM never nears",
    **{(_SERVE, "x_fingerprint", _BLOCK, _BLOCK.replace("1 << 24", after)):
       "the digest of the file's bytes, read in blocks of any size" for after in ("None", "2 << 24", "1 << 25")},
    (_SERVE, "x_fingerprint", _KEY, _KEY.replace("[:16]", "[:17]")):
        "a copy named by one digit more of the same digest: one name for one content all the same",
    **{(_SERVE, function, line, line.replace('"utf-8"', '"UTF-8"')): "one codec, named in capitals"
       for function, line in _CODECS},
    **{(_SERVE, function, line, line.replace('"utf-8"', "None")): _UTF8_HERE for function, line in _CODECS},
    (_SERVE, "x_prepare", _WRITE_CONFIG, _WRITE_CONFIG.replace(', encoding="utf-8"', ", ")): _UTF8_HERE,
    **{(_SERVE, "x_prepare", _WRITE_CONFIG, _WRITE_CONFIG.replace("indent=2", after)):
       "config.json's layout: MAX and transformers read it as JSON" for after in ("indent=None", "indent=3", "")},
    (_SERVE, "x_ready", _HEALTH, _HEALTH.replace("timeout=2", "timeout=3")):
        "how long one try of /health waits, 2 s or 3: a silent server is given up on at the timeout all the same",
    (_SERVE, "x_ready", _WAITING, _WAITING.replace(" < ", " <= ")): "the clock is never exactly at the timeout",
    (_SERVE, "x_ready", _READY, _READY.replace("900.0", "901.0")):
        "a first start's wait of 15 minutes or a second more: past any start the course has timed (126 s)",
    (_SERVE, "x_front_door", _UVICORN_LOG, _UVICORN_LOG.replace('"warning"', '"WARNING"')):
        "uvicorn reads its log level in either case",
    **{(_SERVE, "x_front_door", _WATCH, _WATCH.replace("daemon=True", after)):
       "the watch ends when MAX's server does, and serve stops that server before it exits (main's finally)"
       for after in ("daemon=None", "", "daemon=False")},
    **{(_SERVE, function, line, line.replace("flush=True", after)): _PIPED
       for function, line in _FLUSHED for after in ("flush=None", "", "flush=False")},
}

#: Step 07's TODO code (solutions/step_07_attention.py).
_STEP_07 = {
    (_S07, "xǁCausalSelfAttentionǁattend", _SCORES, _SCORES.replace("(-1, -2)", "(-1, +2)")):
        "k is [batch, heads, tokens, head_dim]: axis +2 is axis -2",
    (_S07, "xǁCausalSelfAttentionǁattend", "weights = F.softmax(scores, axis=-1)", "weights = F.softmax(scores, )"):
        "F.softmax's axis defaults to -1, the keys: the same weights",
}

#: Step 02's TODO code (solutions/step_02_causal_mask.py).
_STEP_02 = {
    (_S02, "x_causal_mask", 'mask = F.full([seq_len, past_len + seq_len], float("-inf"))',
     'mask = F.full([seq_len, past_len + seq_len], float("-INF"))'): "float() reads 'inf' in any case: the same -inf",
    (_S02, "x_causal_mask", _BAND, _BAND.replace("num_lower=None, ", "")):
        "band_part's num_lower defaults to None (no limit below the diagonal): the same band",
}

_RT = "course/runtime.py"
_PINNED_DEVICE = ("no default device is MAX's default, the CPU on a machine without an accelerator, which CI is: only a "
                  "GPU machine could tell (the pin itself is checked through the dtype)")
_PINNED_DTYPE = "no default dtype is MAX's default for the device, float32 on the CPU: only a GPU machine could tell"
_PIN = "for pin in (default_device(CPU()), default_dtype(DType.float32)):"
_KEEP = "if time.perf_counter() - started > KEEP_AFTER_SECONDS:"
_RACE = ("only when another process removes the file between this one's listing (or check) and this call: the "
         "course's own use never does")
_UNLINK_OLD, _UNLINK_BROKEN = "file.unlink(missing_ok=True)", "path.unlink(missing_ok=True)"
_BODY = r'body = re.sub(r"_kernel_library_paths = \[[^\]]*\]", "", text)'
_DIGEST = "digest = hashlib.sha256(f\"{host}\\n{body}{libraries or ''}\".encode()).hexdigest()[:24]"
_SAME_NAMES = ("the same text for every graph: the files' names change once, and stay as distinct (another op, shape, "
               "constant or kernel build) and as stable (MAX's libraries elsewhere)")
_OFTEN = ("if tid in before and not name.startswith(MAX_WORKERS) and wakes - before[tid][1] >= POLLER_WAKES_PER_SECOND "
          "* window:")
#: The course's runtime (course/runtime.py).
_RUNTIME = {
    (_RT, "x_find_max_poller", _OFTEN, _OFTEN.replace(" >= ", " > ")):
        "only a thread that wakes exactly POLLER_WAKES_PER_SECOND x window times in the window could tell: MAX's poller "
        "wakes about five times as often, every other thread of a process under a hundredth as often",
    (_RT, "x_setup", _PIN, _PIN.replace("CPU()", "None")): _PINNED_DEVICE,
    (_RT, "x_setup", _PIN, _PIN.replace("DType.float32", "None")): _PINNED_DTYPE,
    (_RT, "x__host", "return f\"max {version('max')} | {platform.system()} {platform.machine()} | {cpu} | {debug}\"",
     "return f\"max {version('MAX')} | {platform.system()} {platform.machine()} | {cpu} | {debug}\""):
        "a distribution's name is normalized: version('MAX') is version('max')",
    (_RT, "x_trim", "with contextlib.suppress(OSError):  # another process may trim too",
     "with contextlib.suppress(None):  # another process may trim too"): _RACE,
    (_RT, "x_trim", _UNLINK_OLD, _UNLINK_OLD.replace("True", "None")): _RACE,
    (_RT, "x_trim", _UNLINK_OLD, _UNLINK_OLD.replace("True", "False")): _RACE,
    (_RT, "x_reuse_compiled_graphs", _UNLINK_BROKEN, _UNLINK_BROKEN.replace("True", "None")): _RACE,
    (_RT, "x_reuse_compiled_graphs", _UNLINK_BROKEN, _UNLINK_BROKEN.replace("True", "False")): _RACE,
    (_RT, "x_reuse_compiled_graphs", "with contextlib.suppress(OSError):", "with contextlib.suppress(None):"): _RACE,
    (_RT, "x_reuse_compiled_graphs", _KEEP, _KEEP.replace(" > ", " >= ")):
        "a compile's time, measured in floats, is never exactly KEEP_AFTER_SECONDS (0.5): the same graphs are kept",
    (_RT, "x_max_cache", "found = None", 'found = ""'): "an empty name and None are both false: the default place",
    (_RT, "x_graph_file", _BODY, _BODY.replace('"", text', '"XXXX", text')): _SAME_NAMES,
    (_RT, "x_graph_file", _DIGEST, _DIGEST.replace("or ''", "or 'XXXX'")): _SAME_NAMES,
}

_HI = "course/check/hints.py"
#: The ✗ lines' words (course/check/hints.py).
_HINTS = {
    (_HI, "x_todo_for_name", "assigned = False", "assigned = None"): "both are false: a name not assigned yet",
    (_HI, "x_describe", "reason = None", 'reason = ""'): "both are false: no reason is added to the line",
    (_HI, "x_check_title", 'doc = getattr(getattr(item, "function", None), "__doc__", None)',
     'doc = getattr(getattr(item, "function", None), "__doc__", )'):
        "every object has a __doc__ (None where it has no docstring, None's own included): the default is never read",
}

_RN = "course/check/runner.py"
_SIZE = "total += os.lstat(os.path.join(path, name)).st_size"
_DAEMON_THREAD = "self._thread = threading.Thread(target=self._watch, args=watch, daemon=True)"
_LIVE = "live = Live(spinner, console=self.out, transient=True, redirect_stdout=False, redirect_stderr=False)"
_POLL = "while not stopped.wait(min(1.0, self.every / 4)):"
_SKIP_REASON = "reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)"
_NO_XFAIL = ("the course's checks skip only through pytest.skip, whose reports carry (file, line, reason): only an "
             "xfail check, which the course has none of, takes the other branch")
_FLOATS = "elapsed time in floats is never exactly the threshold: the same lines at the same moments"
_DUP = 'out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")'
_CONSOLE = "return Console(file=out, highlight=False, soft_wrap=True)"
_FLUSHED = "rich flushes its file after each print: line buffering or not, each line is out at once"
#: The check runner's report (course/check/runner.py).
_RUNNER = {
    (_RN, "x__cache_bytes", "total = 0", "total = 1"):
        "the size is only compared with itself before the check: an offset cancels",
    (_RN, "x__cache_bytes", "with contextlib.suppress(OSError):", "with contextlib.suppress(None):"):
        "only a file removed between the folder's listing and its lstat raises (MAX tidying its cache as a check runs)",
    (_RN, "x__cache_bytes", _SIZE, _SIZE.replace("(path, name)", "(path, )")):
        "MAX writes each kernel it compiles as a new file: the folder's size counted once a file grows with the files, "
        "as their bytes do",
    **{(_RN, "xǁProgressǁstart", _DAEMON_THREAD, _DAEMON_THREAD.replace("daemon=True", after)):
       "stop() joins the thread before the next check and at the session's end: it never outlives the run"
       for after in ("daemon=None", "", "daemon=False")},
    **{(_RN, "x__uncaptured_console", _DUP, _DUP.replace(before, after)): why for before, after, why in (
        ("buffering=1, ", "", _FLUSHED), ("buffering=1", "buffering=2", _FLUSHED), ('"utf-8"', '"UTF-8"', _UTF8_NAME))},
    (_RN, "x__uncaptured_console", _CONSOLE, _CONSOLE.replace("highlight=False", "highlight=None")):
        "rich reads the flag as a truth value: None is False",
    **{(_RN, "x__uncaptured_console", _CONSOLE, _CONSOLE.replace("highlight=False, ", after)):
       "this console prints lines only off a terminal (on one, the status line is a Live display), where rich writes "
       "no colour: highlighting changes no character" for after in ("", "highlight=True, ")},
    (_RN, "xǁProgressǁ_watch", _LIVE, _LIVE.replace("redirect_stdout=False", "redirect_stdout=None")):
        "rich reads the flag as a truth value: None is False",
    **{(_RN, "xǁProgressǁ_watch", _LIVE, _LIVE.replace(", redirect_stderr=False", after)):
       "the runner writes nothing to stderr while the checks run: a status line that takes stderr over, and gives "
       "back the check's capture of it, changes no line the learner reads"
       for after in (", redirect_stderr=None", ", ", ", redirect_stderr=True")},
    **{(_RN, "xǁProgressǁ_watch", _POLL, _POLL.replace(before, after)):
       "how often the watch looks (a quarter of the interval, at most each second): how soon a line comes after its "
       "time, not what it says" for before, after in (("1.0", "2.0"), ("/ 4", "* 4"), ("/ 4", "/ 5"))},
    (_RN, "xǁProgressǁ_watch", "if elapsed < self.quiet:", "if elapsed <= self.quiet:"): _FLOATS,
    (_RN, "xǁProgressǁ_watch", "elif elapsed >= next_line:", "elif elapsed > next_line:"): _FLOATS,
    (_RN, "xǁProgressǁ_watch", "break", "return"):
        "reached only when the check ends while the cache is read, a window of microseconds: stop() then ends the "
        "thread either way",
    **{(_RN, "xǁProgressǁstop", "self._thread.join(timeout=5)", f"self._thread.join(timeout={after})"):
       "the watch wakes at least each second and ends as soon as it sees the event: the join returns within a second, "
       "whatever its bound" for after in ("None", "6")},
    **{(_RN, "xǁReportǁ__init__", 'self.title = ""  # the running check\'s', f"self.title = {after}  # the running check's"):
       "pytest_runtest_protocol sets the title before any check reports: the first value is never read"
       for after in ("None", '"XXXX"')},
    (_RN, "xǁReportǁpytest_runtest_logreport", 'if report.when == "call" or report.failed or report.skipped:',
     'if report.when == "call" or report.failed and report.skipped:'):
        "pytest_runtest_protocol stops the watch as each check ends too: stopping it before a failed or skipped "
        "setup's line only closes the instant between that line and the check's end",
    (_RN, "xǁReportǁpytest_runtest_logreport", 'elif report.failed and getattr(report, "course_fault", False):',
     'elif report.failed and getattr(report, "course_fault", None):'): "both defaults are false: a learner's failure",
    (_RN, "xǁReportǁpytest_runtest_logreport", _SKIP_REASON,
     _SKIP_REASON.replace("if isinstance(report.longrepr, tuple)", "if (isinstance(report.longrepr, tuple)) or True")):
        _NO_XFAIL,
    (_RN, "xǁReportǁpytest_runtest_logreport", _SKIP_REASON, _SKIP_REASON.replace("str(report.longrepr)", "str(None)")):
        _NO_XFAIL,
}

_BD = "course/programs/build.py"
_ONLY_CPU = ("None is the CPU (MAX's CPU() is one object), the only device here: a machine with an accelerator "
             "would tell (main --device gpu)")
_ON_DEVICE = {  # a runner's constructor, or the road to one, given the device: (function, the line as written)
    ("x_compile_model", "return _compile_llama(steps, pretrained, device, cached, quantize, decode or kernel)"),
    ("x_compile_model", "runner = steps[16].DecodeNextLogits(model, config, device, getattr(DType, cache_type(kernel, "
                        "quantize)),"),
    ("x_compile_model", "return steps[15].CachedNextLogits(model, config, device)"),
    ("x_compile_model", "return steps[13].compile_next_logits(model, device)"),
    ("x__compile_llama", "return steps[24].CachedLlamaNextLogits(model, config, device)"),
    ("x__compile_llama", "return steps[13].compile_next_logits(model, device)"),
}
_BUILD = {
    **{(_BD, function, line, line.replace(", device", after, 1)): _ONLY_CPU for function, line in _ON_DEVICE
       for after in ((", None", ", ") if line.endswith("device)") else (", None",))},  # a last argument is dropped too
    (_BD, "x__compile_llama", "model = (steps[24].CachedLlamaForCausalLM if cached else steps[22].LlamaForCausalLM)(config)",
     "model = (steps[24].CachedLlamaForCausalLM if cached else steps[23].LlamaForCausalLM)(config)"):
        "step 23 imports step 22's LlamaForCausalLM: the same class by either name",
}

_LL = "course/programs/llama.py"
_TAIL = "tail = (log.read().decode(errors=\"replace\") + logged.getvalue()).strip().splitlines()[-3:]"
_NO_FD_LOG = ("llama-cpp-python 0.3.36 sends llama.cpp's whole log through its Python callback: nothing reaches "
              "file descriptor 2 (measured: 0 bytes quantizing a good file, a truncated one and one that is not GGUF), "
              "so the descriptor's log is empty; its redirect guards builds whose C code prints directly")
_WARM_UP = "the warm-up's length changes no timed token: the timed run starts from model.reset(), its prompt anew"
_GENERATE_LINE = "model = open_model(path, n_ctx, max(len(prompt), 8), cache)"
_LLAMA = {
    (_LL, "x_quantize", "log.seek(0)", "log.seek(1)"): _NO_FD_LOG,
    **{(_LL, "x_quantize", _TAIL, _TAIL.replace('"replace"', after)): _NO_FD_LOG for after in ('"XXreplaceXX"', '"REPLACE"')},
    (_LL, "x_quantize", _TAIL, _TAIL.replace("[-3:]", "[-4:]")):
        "a failed quantize logs 1 or 2 lines here (measured: a truncated file, one that is not GGUF): the last 3 or 4 "
        "lines are its whole log",
    (_LL, "x_time_generation", _GENERATE_LINE, _GENERATE_LINE.replace(", 8)", ", 9)")):
        "n_batch caps the prompt tokens llama.cpp evaluates at once: any value from the prompt's length up is one batch",
    (_LL, "x_time_generation", "run(8)  # warm-up", "run(None)  # warm-up"): _WARM_UP,
    (_LL, "x_time_generation", "run(8)  # warm-up", "run(9)  # warm-up"): _WARM_UP,
    (_LL, "x_open_model", "n_batch=n_batch, type_k=kv, type_v=kv, verbose=False)",
     "n_batch=n_batch, type_k=kv, type_v=kv, verbose=None)"):
        "llama-cpp-python reads verbose as a truth value: None is False, its log level and its silenced loading alike",
    **{(_LL, "x_write_f32", line, line.replace('"utf-8"', '"UTF-8"')): _UTF8_NAME for line in (
        'vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))',
        'merges = [line for line in (folder / "merges.txt").read_text(encoding="utf-8").splitlines()')},
}

_BE = "course/programs/bench.py"
_SOLUTIONS_ANY = ("import_steps reads SOLUTIONS, the folder bench passes, for any target but \"steps\" (whose learner's "
                  "files it would first vet): the same modules")
_LAYOUT = ("the picture's layout a step larger (its size, a margin, a gap, a label's offset, a pixel): every point, "
           "tick and label still where the checks ask, inside the picture, off the lines and points, by its value")
_THOUSANDTH = "a value a thousandth or a millionth off: below what the picture shows (its labels are whole tok/s and MB)"
_TICKS = ("another tick value (3 for 2, 2001 for 2000, 2 twice) is still labelled at its own place on the log axis; "
          "a tick at 1 falls below GPT-2's megabytes and tok/s")
_AT_THE_END = ("a value exactly at a boundary (a tick at an axis' end, a point at the picture's middle, two boxes that "
               "only touch): no run's values land there, and either way the picture holds it")
_TORCH_CPU = ("None is PyTorch's default device, the CPU: the device of every run here (--device gpu needs a CUDA "
              "PyTorch, which bench refuses to run without)")
_WARM_UP = "the warm-up's input or length: it is not timed, and after it the timed run is the same"
_NO_PAD = ("no sequence finishes (min_new_tokens holds the end token back) and the attention mask is given, so no pad "
           "is written or read: the id only quiets generate's warning, which the worker's stderr swallows")
_RICH_LEFT = 'rich justifies a cell left unless told "right", "center" or "full": these draw the same table'
_PLAIN_CELLS = ("rich's highlighter colours the strings print() is handed, not a Table's cells: the same table, in "
                "colour or not (measured with FORCE_COLOR=1)")
_WHO_MOVES = ("the order the labels are placed in decides which of two colliding labels moves off its point: in any "
              "order none covers another or a point, and each moved one has its leader line")
_LEADER = ("a label left beside its point is centred on it, a moved one 13 px (a row) or more off it: any threshold "
           "between draws the same leaders")
_ROWS = ("the same rows in the same order: side is 1 or -1, so k / side is k * side; at k = 0 the side multiplies 0, "
         "so the row beside the point is the first whatever the sides; k to 32 or to 35 both pass the 26 rows of 13 px "
         "the axes hold")
_EDGE = ("the band a label's row may take, a pixel in at one edge: rows fall on the edge only by chance (the points' "
         "heights are a log scale's), and the checks hold every label inside the axes at both edges")
_NEVER_FULL = ("never reached: every label finds a free row (at most 15 labels and 15 points, their rows spread over the "
               "axes' 26), so the row used when none is free does not matter")
_WIDE = ("a width past any row bench prints (the widest, every column of the llama.cpp and accuracy runs, is under 260 "
         "characters): each row whole alike")
_UNREAD = "bench reads the bandwidth only with --roofline, which sets it first"
_GPU_ONLY = ("reached only with --device gpu and a CUDA build of PyTorch, which bench refuses to run without; neither this "
             "machine nor CI has one (the lent GPU machine cannot install MAX 26.7)")
_SCRATCH = ("a name inside bench's scratch folder (the folder's, the random checkpoint's): bench deletes the folder when "
            "it ends, and every path is handed the name it made")
_HIDDEN = ("the hidden --worker option is given only by bench's own _run_worker, with a path it took from PATHS: no "
           "other value reaches it")
_LAST_DIM = "the logits of one window are [positions, vocabulary]: dimension 1 is dimension -1"
_BENCH = {
    **{(_BE, function, line, after): reason for function, line, reason, afters in (  # as written, then as mutated
        ('x__hf_perplexity', 'nll += (-torch.log_softmax(logits, -1)[torch.arange(len(window) - 1), window[1:]]).tolist()', _LAST_DIM, (
            'nll += (-torch.log_softmax(logits, +1)[torch.arange(len(window) - 1), window[1:]]).tolist()',
        )),
        ('x_main', 'model = str(random_checkpoint(Path(scratch) / "random-gpt2", n_layer=args.layers))', _SCRATCH, (
            'model = str(random_checkpoint(Path(scratch) / "XXrandom-gpt2XX", n_layer=args.layers))',
            'model = str(random_checkpoint(Path(scratch) / "RANDOM-GPT2", n_layer=args.layers))',
        )),
        ('x_main', 'p.add_argument("--worker", choices=list(PATHS), help=argparse.SUPPRESS)', _HIDDEN, (
            'p.add_argument("--worker", choices=None, help=argparse.SUPPRESS)',
            'p.add_argument("--worker", help=argparse.SUPPRESS)',
        )),
        ('x_main', 'table.add_column(column, justify="left" if column == "path" else "right")', _RICH_LEFT, (
            'table.add_column(column, justify="XXleftXX" if column == "path" else "right")',
            'table.add_column(column, justify="LEFT" if column == "path" else "right")',
        )),
        ('x_main', 'Console(highlight=False, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1000).print(table)', _PLAIN_CELLS, (
            'Console(highlight=None, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1000).print(table)',
            'Console(highlight=True, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1000).print(table)',
            'Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1000).print(table)',
        )),
        ('x_main', 'Console(highlight=False, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1000).print(table)', _WIDE, (
            'Console(highlight=False, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 1001).print(table)',
        )),
        ('x__time_ours', 'check(quantize, config, device)', _ONLY_CPU, (
            'check(quantize, config, None)',
        )),
        ('x__time_ours', 'reference = compile_model(steps, pretrained, device, True)', _ONLY_CPU, (
            'reference = compile_model(steps, pretrained, None, True)',
        )),
        ('x__time_ours', 'kwargs = dict(n_positions=context(config), temperature=0.0)',
         "step 13's generate is greedy unless told otherwise (temperature=0.0 is its default): bench says so anyway", (
            'kwargs = dict(n_positions=context(config), )',
        )),
        ('x__time_ours', 'list(gen.generate(next_logits, prompt, 8, **kwargs))  # warm-up', _WARM_UP, (
            'list(gen.generate(next_logits, prompt, 9, **kwargs))  # warm-up',
        )),
        ('x_worker_failed', 'if returncode < 0:',
         "bench calls it only for a process that failed, whose code is never 0: <= 0 and < 1 split the codes the same", (
            'if returncode <= 0:',
            'if returncode < 1:',
        )),
        ('x__time_hf', 'where = "cuda" if device == "gpu" else "cpu"', _TORCH_CPU, (
            'where = None',
        )),
        ('x__time_hf', 'where = "cuda" if device == "gpu" else "cpu"', _GPU_ONLY, (
            'where = "cuda" if (device == "gpu") and False else "cpu"',
            'where = "XXcudaXX" if device == "gpu" else "cpu"',
            'where = "CUDA" if device == "gpu" else "cpu"',
            'where = "cuda" if device == "XXgpuXX" else "cpu"',
            'where = "cuda" if device == "GPU" else "cpu"',
        )),
        ('x__time_hf', 'model = model.to(where).eval()', _TORCH_CPU, (
            'model = model.to(None).eval()',
        )),
        ('x__time_hf', 'sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)', _GPU_ONLY, (
            'sync = torch.cuda.synchronize if (where == "cuda") and False else (lambda: None)',
            'sync = torch.cuda.synchronize if where == "XXcudaXX" else (lambda: None)',
            'sync = torch.cuda.synchronize if where == "CUDA" else (lambda: None)',
        )),
        ('x__time_hf', 'sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)',
         "what the CPU's sync returns is not read", (
            'sync = torch.cuda.synchronize if where == "cuda" else (lambda: 0)',
        )),
        ('x__time_hf', 'kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True, pad_token_id=0)', _NO_PAD, (
            'kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True, pad_token_id=None)',
            'kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True, )',
            'kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True, pad_token_id=1)',
        )),
        ('x__time_hf', 'model.generate(ids, max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up', _WARM_UP, (
            'model.generate(None, max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up',
            'model.generate(ids, max_new_tokens=None, min_new_tokens=8, **kwargs)  # warm-up',
            'model.generate(ids, max_new_tokens=8, min_new_tokens=None, **kwargs)  # warm-up',
            'model.generate(max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up',
            'model.generate(ids, min_new_tokens=8, **kwargs)  # warm-up',
            'model.generate(ids, max_new_tokens=8, **kwargs)  # warm-up',
            'model.generate(ids, max_new_tokens=8, min_new_tokens=8, )  # warm-up',
            'model.generate(ids, max_new_tokens=9, min_new_tokens=8, **kwargs)  # warm-up',
            'model.generate(ids, max_new_tokens=8, min_new_tokens=9, **kwargs)  # warm-up',
        )),
        ('x__prompt', 'return np.random.default_rng(12).integers(0, vocab, size=n).tolist()',
         "NumPy reads integers' one bound as the high one: [0, vocab), the same draws", (
            'return np.random.default_rng(12).integers(vocab, size=n).tolist()',
        )),
        ('x_worker', 'reference = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)',
         "dtype=None loads float32, PyTorch's default (measured on a checkpoint whose config asks for float16; "
         "no dtype at all loads float16 there, which the check sees)", (
            'reference = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=None)',
        )),
        ('x_worker', 'times, tokens = _time_hf(reference, prompt, new_tokens, device)', _GPU_ONLY, (
            'times, tokens = _time_hf(reference, prompt, new_tokens, None)',
        )),
        ('x_worker', 'context = getattr(reference.config, "n_positions", None) or reference.config.max_position_embeddings',
         "GPT2Config maps max_position_embeddings to n_positions: the same context by either name", (
            'context = getattr(None, "n_positions", None) or reference.config.max_position_embeddings',
            'context = getattr(reference.config, "XXn_positionsXX", None) or reference.config.max_position_embeddings',
            'context = getattr(reference.config, "N_POSITIONS", None) or reference.config.max_position_embeddings',
        )),
        ('x__time_hf', 'ids = torch.tensor([prompt], device=where)', _TORCH_CPU, (
            'ids = torch.tensor([prompt], device=None)',
            'ids = torch.tensor([prompt], )',
        )),
        ('x__time_hf', 'kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True, pad_token_id=0)',
         "generate reads an explicit do_sample=None as not sampling (measured: greedy on a checkpoint whose "
         "generation_config.json samples at temperature 5)", (
            'kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=None, use_cache=True, pad_token_id=0)',
        )),
        ('x__run_worker', 'result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.worker_timeout)',
         "the course is an installed package (pip install -e ., pixi's editable install) and bench hands its worker "
         "absolute paths: it runs the same from any folder (the check runs it from a scratch one)", (
            'result = subprocess.run(command, cwd=None, capture_output=True, text=True, timeout=args.worker_timeout)',
            'result = subprocess.run(command, capture_output=True, text=True, timeout=args.worker_timeout)',
        )),
        ('x_main', 'bandwidth = None', _UNREAD, (
            'bandwidth = ""',
        )),
        ('x_main', 'paths = ["hf", "no_cache", "cache", "decode", *(["kernel"] if args.device == "cpu" else []),', _GPU_ONLY, (
            'paths = ["hf", "no_cache", "cache", "decode", *(["kernel"] if (args.device == "cpu") or True else []),',
        )),
        ('x_main', 'with tempfile.TemporaryDirectory(prefix="bench-") as scratch:', _SCRATCH, (
            'with tempfile.TemporaryDirectory(prefix=None) as scratch:',
            'with tempfile.TemporaryDirectory(prefix="XXbench-XX") as scratch:',
            'with tempfile.TemporaryDirectory(prefix="BENCH-") as scratch:',
        )),
        ('x_roofline', 'out.append(f\'<text x="{sx(value):.0f}" y="{height - pad + 16}" text-anchor="middle">{value}</text>\')', _LAYOUT, (
            'out.append(f\'<text x="{sx(value):.0f}" y="{height - pad + 17}" text-anchor="middle">{value}</text>\')',
        )),
        ('x_roofline', 'out.append(f\'<text x="{pad - 6}" y="{sy(value) + 4:.0f}" text-anchor="end">{value}</text>\')', _LAYOUT, (
            'out.append(f\'<text x="{pad - 7}" y="{sy(value) + 4:.0f}" text-anchor="end">{value}</text>\')',
        )),
        ('x_roofline', 'out.append(f\'<text x="{width - pad}" y="{pad - 8}" text-anchor="end" fill="#d93025">memory limit: \'', _LAYOUT, (
            'out.append(f\'<text x="{width - pad}" y="{pad - 9}" text-anchor="end" fill="#d93025">memory limit: \'',
        )),
        ('x_roofline', 'boxes = [(sx(x) - 5, sx(x) + 5, sy(y) - 5, sy(y) + 5) for x, y in points.values()]', _LAYOUT, (
            'boxes = [(sx(x) - 6, sx(x) + 5, sy(y) - 5, sy(y) + 5) for x, y in points.values()]',
            'boxes = [(sx(x) - 5, sx(x) + 6, sy(y) - 5, sy(y) + 5) for x, y in points.values()]',
            'boxes = [(sx(x) - 5, sx(x) + 5, sy(y) - 6, sy(y) + 5) for x, y in points.values()]',
            'boxes = [(sx(x) - 5, sx(x) + 5, sy(y) - 5, sy(y) + 6) for x, y in points.values()]',
        )),
        ('x_roofline', 'right = cx < width / 2', _LAYOUT, (
            'right = cx < width / 3',
        )),
        ('x_roofline', 'if y_lo <= value <= y_hi:', _AT_THE_END, (
            'if y_lo <= value < y_hi:',
        )),
        ('x_roofline', 'right = cx < width / 2', _AT_THE_END, (
            'right = cx <= width / 2',
        )),
        ('x_roofline', 'and not any(x0 < b1 and b0 < x1 and y - 10 < c1 and c0 < y + 3 for b0, b1, c0, c1 in boxes)]', _AT_THE_END, (
            'and not any(x0 <= b1 and b0 < x1 and y - 10 < c1 and c0 < y + 3 for b0, b1, c0, c1 in boxes)]',
            'and not any(x0 < b1 and b0 <= x1 and y - 10 < c1 and c0 < y + 3 for b0, b1, c0, c1 in boxes)]',
        )),
        ('x_roofline', 'rows = [cy + 4 + 13 * k * side for k in range(height // 13) for side in ((1,) if k == 0 else (1, -1))]', _ROWS, (
            'rows = [cy + 4 + 13 * k / side for k in range(height // 13) for side in ((1,) if k == 0 else (1, -1))]',
            'rows = [cy + 4 + 13 * k * side for k in range(height // 14) for side in ((1,) if k == 0 else (1, -1))]',
            'rows = [cy + 4 + 13 * k * side for k in range(height // 13) for side in ((1,) if (k == 0) and False else (1, -1))]',
            'rows = [cy + 4 + 13 * k * side for k in range(height // 13) for side in ((2,) if k == 0 else (1, -1))]',
        )),
        ('x_roofline', 'free = [y for y in rows if pad + 10 <= y <= height - pad - 3', _EDGE, (
            'free = [y for y in rows if pad + 11 <= y <= height - pad - 3',
            'free = [y for y in rows if pad + 10 < y <= height - pad - 3',
            'free = [y for y in rows if pad + 10 <= y < height - pad - 3',
            'free = [y for y in rows if pad + 10 <= y <= height - pad - 4',
        )),
        ('x_roofline', 'label_y = free[0] if free else cy + 4', _NEVER_FULL, (
            'label_y = free[0] if (free) or True else cy + 4',
            'label_y = free[0] if free else cy - 4',
            'label_y = free[0] if free else cy + 5',
        )),
        ('x_roofline', 'out.append(f\'<line x1="{sx(x_lo):.1f}" y1="{sy(bandwidth * 1e3 / x_lo):.1f}" x2="{sx(x_hi):.1f}" \'', _THOUSANDTH, (
            'out.append(f\'<line x1="{sx(x_lo):.1f}" y1="{sy(bandwidth * 1001.0 / x_lo):.1f}" x2="{sx(x_hi):.1f}" \'',
        )),
        ('x_roofline', 'f\'y2="{sy(bandwidth * 1e3 / x_hi):.1f}" stroke="#d93025" stroke-dasharray="5 4" stroke-width="1.5"/>\')', _THOUSANDTH, (
            'f\'y2="{sy(bandwidth * 1001.0 / x_hi):.1f}" stroke="#d93025" stroke-dasharray="5 4" stroke-width="1.5"/>\')',
        )),
        ('x_roofline', 'for path, (x, y) in sorted(points.items(), key=lambda item: -item[1][1]):', _WHO_MOVES, (
            'for path, (x, y) in sorted(points.items(), key=None):',
            'for path, (x, y) in sorted(points.items(), ):',
            'for path, (x, y) in sorted(points.items(), key=lambda item: +item[1][1]):',
        )),
        ('x_roofline', 'if abs(label_y - 4 - cy) > 8:  # moved to clear another label: a leader line to its point', _LEADER, (
            'if abs(label_y - 4 - cy) >= 8:  # moved to clear another label: a leader line to its point',
            'if abs(label_y - 4 - cy) > 9:  # moved to clear another label: a leader line to its point',
            'if abs(label_y - 5 - cy) > 8:  # moved to clear another label: a leader line to its point',
        )),
        ('x_roofline', 'points = {path: (bytes_read(path, config) / 1e6, r["decode_tok_s"]) for path, r in results.items()}', _THOUSANDTH, (
            'points = {path: (bytes_read(path, config) / 1000001.0, r["decode_tok_s"]) for path, r in results.items()}',
        )),
        ('x_roofline', 'width, height, pad = 680, 460, 60', _LAYOUT, (
            'width, height, pad = 681, 460, 60',
            'width, height, pad = 680, 461, 60',
            'width, height, pad = 680, 460, 61',
        )),
        ('x_roofline', 'x_lo, x_hi = min(x for x, _ in points.values()) / 2, max(x for x, _ in points.values()) * 2', _LAYOUT, (
            'x_lo, x_hi = min(x for x, _ in points.values()) / 2, max(x for x, _ in points.values()) * 3',
        )),
        ('x_roofline', 'y_lo = min(y for _, y in points.values()) / 2', _LAYOUT, (
            'y_lo = min(y for _, y in points.values()) / 3',
        )),
        ('x_roofline', 'y_hi = max(max(y for _, y in points.values()), bandwidth * 1e3 / x_lo) * 1.5', _LAYOUT, (
            'y_hi = max(max(y for _, y in points.values()), bandwidth * 1e3 / x_lo) * 2.5',
        )),
        ('x_roofline', 'f\'<text x="{width / 2}" y="{height - 14}" text-anchor="middle">MB of weights read per token (log)</text>\',', _LAYOUT, (
            'f\'<text x="{width / 2}" y="{height - 15}" text-anchor="middle">MB of weights read per token (log)</text>\',',
        )),
        ('x_roofline', 'for value in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000):', _TICKS, (
            'for value in (2, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000):',
            'for value in (1, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000):',
            'for value in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2001):',
        )),
        ('x_roofline', 'if x_lo <= value <= x_hi:', _AT_THE_END, (
            'if x_lo < value <= x_hi:',
            'if x_lo <= value < x_hi:',
        )),
        ('x_plot', 'points.append((i + 1, 1000 * i / total))', _THOUSANDTH, (
            'points.append((i + 1, 1001 * i / total))',
        )),
        ('x_plot', 'plot_width, height, pad = 540, 360, 50', _LAYOUT, (
            'plot_width, height, pad = 541, 360, 50',
        )),
        ('x_plot', "legend = pad + plot_width + 20  # the legend's column, right of the axes: it covers no line", _LAYOUT, (
            "legend = pad + plot_width + 21  # the legend's column, right of the axes: it covers no line",
        )),
        ('x_plot', 'width = legend + round(CHAR_WIDTH * 12 * max(len(f"— {labels[path]}") for path in curves)) + 10', _LAYOUT, (
            'width = legend + round(CHAR_WIDTH * 13 * max(len(f"— {labels[path]}") for path in curves)) + 10',
            'width = legend + round(CHAR_WIDTH * 12 * max(len(f"— {labels[path]}") for path in curves)) + 11',
        )),
        ('x_plot', 'f\'<text x="{pad + plot_width / 2}" y="{height - 12}" text-anchor="middle">tokens generated</text>\',', _LAYOUT, (
            'f\'<text x="{pad + plot_width / 2}" y="{height - 13}" text-anchor="middle">tokens generated</text>\',',
        )),
        ('x_plot', 'out.append(f\'<text x="{pad - 6}" y="{sy(y) + 4:.0f}" text-anchor="end">{y:.0f}</text>\')', _LAYOUT, (
            'out.append(f\'<text x="{pad - 7}" y="{sy(y) + 4:.0f}" text-anchor="end">{y:.0f}</text>\')',
        )),
        ('x_plot', 'out.append(f\'<text x="{sx(x):.0f}" y="{height - pad + 16}" text-anchor="middle">{x:.0f}</text>\')', _LAYOUT, (
            'out.append(f\'<text x="{sx(x):.0f}" y="{height - pad + 17}" text-anchor="middle">{x:.0f}</text>\')',
        )),
        ('x_plot', 'out.append(f\'<text x="{legend}" y="{pad + 16 * i}" fill="{COLOURS[path]}">— {labels[path]}</text>\')', _LAYOUT, (
            'out.append(f\'<text x="{legend}" y="{pad + 17 * i}" fill="{COLOURS[path]}">— {labels[path]}</text>\')',
        )),
    ) for after in afters},
    **{(_BE, function, line, line.replace('"solutions"', after, 1)): _SOLUTIONS_ANY for function, line in (
        ("x__windows", 'tokenizer = import_steps("solutions", SOLUTIONS, [12])[12].Tokenizer.from_dir(folder)'),
        ("x__time_ours", 'steps = import_steps("solutions", SOLUTIONS, [*needed, cache_step, 16])'),
        ("x_bytes_read", 'return import_steps("solutions", SOLUTIONS, [16])[16].bytes_per_token(config, bits / 8)'),
        ("x_main", 'bandwidth = import_steps("solutions", SOLUTIONS, [16])[16].measure_bandwidth()'),
        ("x_import_steps_config", 'return import_steps("solutions", SOLUTIONS, [14])[14].config_from_json(find(model).config)'))
       for after in ("None", '"XXsolutionsXX"', '"SOLUTIONS"')},
}

_RENDER = {
    ("course/authoring/render.py", "x_unfinished_todos", "todo = None", 'todo = ""'):
        "a stub block with no TODO above it is then recorded under \"\", a key no TODO's number (an int) looks up",
    ("course/authoring/render.py", "x_render_all", '(out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\\n")',
     '(out_dir / MANIFEST).write_text(json.dumps(manifest, indent=3, sort_keys=True) + "\\n")'):
        "the manifest indented by three spaces, not two: still a line a stub, sorted",
}

_DG = "course/authoring/diagrams.py"
_DIAGRAMS = {
    (_DG, "x_causal_mask", "body.append(_rect(x + 2, 22, count * cell - 4, 24, fill, rx=4, stroke=False))",
     "body.append(_rect(x + 2, 22, count * cell - 4, 24, fill, rx=4, stroke=None))"):
        "_rect reads stroke as a truth value: None is False, and the bracket is drawn without an outline alike",
    (_DG, "x_causal_mask",
     'return _svg(max(left + total * cell + 20, 640), bottom + 28 + 20 * len(notes), "The causal mask with a past_len offset", body)',
     'return _svg(max(left + total * cell + 21, 640), bottom + 28 + 20 * len(notes), "The causal mask with a past_len offset", body)'):
        "a wider mask's margin right of its last column, one pixel more: the grid still fits (the picture's bounds are checked)",
}

_OP = "course/authoring/op_profile.py"
_POPEN = "stderr=subprocess.STDOUT, text=True, bufsize=1)"
_ROW_GAP = 'table.add_row("between ops, inside the graph (the runtime\'s own work)", "", f"{1000 * between:.2f}",'
_ROW_PY = 'table.add_row("Python: into the graph and back, the argmax", "", f"{1000 * python:.2f}", f"{python / whole:.0%}")'
_OP_PROFILE = {
    **{(_OP, "x_main", _POPEN, _POPEN.replace("bufsize=1", after)): (
        "the parent only reads the pipe: a text stream returns each line as soon as the child's python -u writes it, "
        "whatever the size of the parent's own buffer") for after in ("bufsize=None", "", "bufsize=2")},
    (_OP, "x_main", "names = {name for p in per_step for name in p[0]}", "names = {name for p in per_step for name in p[1]}"):
        "profile fills its seconds and its counts for the same names",
    (_OP, "x_main", "count = {name: max(p[1].get(name, 0) for p in per_step) for name in names}",
     "count = {name: max(p[1].get(name, 1) for p in per_step) for name in names}"):
        "every name ran at least once in some step, so the most a step ran it is 1 or more either way",
    (_OP, "x_main", _ROW_GAP, _ROW_GAP.replace('"", f"', 'None, f"')): "rich draws a cell of None as an empty one",
    (_OP, "x_main", _ROW_PY, _ROW_PY.replace('"", f"', 'None, f"')): "rich draws a cell of None as an empty one",
    (_OP, "x_main", "console = Console(width=120)", "console = Console(width=121)"):
        "one column wider than the tables need: the same lines",
    (_OP, "x_main", 'f"{1e6 * median[name] / max(count[name], 1):.0f}")',
     'f"{1000001.0 * median[name] / max(count[name], 1):.0f}")'): "a millionth more µs, below the whole µs shown",
}

_OR = "course/authoring/one_row.py"
_OR_MB = 'print(f"one row [1, {args.width}] times a weight [{args.rows}, {args.width}] ({w.nbytes / 1e6:.0f} MB), "'
_ONE_ROW = {
    (_OR, "x_main", "rng = np.random.default_rng(0)", "rng = np.random.default_rng(1)"):
        "another seed draws another Gaussian matrix and row of the same sizes: the same bytes to read, the same "
        "order of |Δ|, and still the same from run to run",
    (_OR, "x_main", "gb = w.nbytes / 1e9", "gb = w.nbytes / 1000000001.0"):
        "a billionth of the GB/s, which is shown to one decimal",
    (_OR, "x_main", _OR_MB, _OR_MB.replace("1e6", "1000001.0")): "a millionth of the MB, which are shown whole",
}

_EX = "course/authoring/experiments.py"
_EX_RUN = "cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)"
_EX_INSERT = "lines[experiment.marker_line + 1 : experiment.marker_line + 1] = block"
_EXPERIMENTS = {
    **{(_EX, "x__run_check", _EX_RUN, _EX_RUN.replace("check=False", after)):
       "check=False is subprocess.run's default, and None is as false: a failing check's output is read either way"
       for after in ("check=None", "")},
    (_EX, "x__run_check", _EX_RUN, _EX_RUN.replace("900", "901")):
        "a second more on a limit of 15 minutes for a check that takes seconds",
    (_EX, "x_write_block", _EX_INSERT, _EX_INSERT.replace(": experiment.marker_line + 1]", ": experiment.marker_line - 1]")):
        "a slice that ends before it starts is empty at its start: the block is inserted after the marker either way",
    (_EX, "x_run", "sys.argv = [str(script)]", "sys.argv = [str(None)]"):
        "runpy.run_path sets sys.argv[0] to the script's path itself while it runs: what the line gives the script is "
        "a list of one (the command's own arguments gone), which [str(None)] is too",
}

_TR = "course/authoring/train.py"
_IMPORT_KJV = 'KJV.write_text(kjv_from_bible_program(args.import_kjv.read_text(encoding="utf-8")), encoding="utf-8")'
_TRAIN_INT64 = ("the token ids are Python ints from the tokenizer and the fill a Python int, which NumPy 2 makes int64 on "
                "every 64-bit platform: the same index and the same ids")
_ADAMW = ("optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.95), "
          "weight_decay=WEIGHT_DECAY)")
_TASK = 'task = bar.add_task("train", total=steps, loss="…", held="…")'
_NO_DESCRIPTION = "the task's description, which no column of the bar shows (its first column is the text \"training\")"
_FIRST_FIELDS = ("the bar's loss and held-out fields before the first step's update replaces them: drawn on a terminal "
                 "for the first step's fraction of a second; off a terminal only the bar's last state is printed")
_TRAIN = {
    **{(_TR, function, line, line.replace('"utf-8"', '"UTF-8"')): _UTF8_NAME for function, line in (
        ("x_chapters", 'return [(path.stem, path.read_text(encoding="utf-8")) for path in sorted(BOOK.glob("*.md")) '
                       'if path.name != "SUMMARY.md"]'),
        ("x_bible", 'return KJV.read_text(encoding="utf-8").strip().split("\\n\\n\\n")'),
        ("x_train", 'same_text = (COURSE_MODEL / "heldout.txt").read_text(encoding="utf-8") if family == "llama" else None'),
        ("x_save", '(out / "heldout.txt").write_text(text["held_out_text"], encoding="utf-8")'),
        ("x_save", '(out / "heldout-kjv.txt").write_text(text["kjv_held_out_text"], encoding="utf-8")'))},
    **{(_TR, "x_main", _IMPORT_KJV, after): _UTF8_NAME for after in (
        _IMPORT_KJV.replace('"utf-8"', '"UTF-8"', 1), _IMPORT_KJV[::-1].replace('"8-ftu"', '"8-FTU"', 1)[::-1])},
    **{(_TR, "x_corpus", line, line.replace('"utf-8"', '"UTF-8"')): _UTF8_NAME
       for line in ('digest.update(text.encode("utf-8"))', 'digest.update(book.encode("utf-8"))')},
    **{(_TR, "x_train", line, line.replace(", dtype=np.int64", after)): _TRAIN_INT64 for after in (", dtype=None", ", ")
       for line in ("index = np.full(VOCABULARY, len(used), dtype=np.int64)", "ids = index[np.asarray(ids, dtype=np.int64)]",
                    'held_out = windows(index[np.asarray(text["held_out"], dtype=np.int64)], length)',
                    'kjv_held_out = windows(index[np.asarray(text["kjv_held_out"], dtype=np.int64)], length)')},
    (_TR, "x_train", "starts = rng.integers(0, len(ids) - length - 1, size=BATCH)",
     "starts = rng.integers(len(ids) - length - 1, size=BATCH)"):
        "integers(n) draws from [0, n) as integers(0, n) does, the same numbers from the same generator",
    **{(_TR, "x_train", "with Progress(*columns, transient=False) as bar:", f"with Progress(*columns, {after}) as bar:"):
       "transient=False is rich's default for a Progress, and None is as false: the bar stays when it ends"
       for after in ("transient=None", "")},
    (_TR, "x_train", _ADAMW, _ADAMW.replace("lr=LEARNING_RATE, ", "")):
        "each step sets every group's rate from the schedule before the optimizer steps: the rate it is built with is "
        "never used",
    **{(_TR, "x_train", "optimizer.zero_grad(set_to_none=True)", f"optimizer.zero_grad(set_to_none={after})"):
       "gradients zeroed or dropped: the next backward() adds into zeros or starts them anew, the same gradients, and "
       "AdamW steps alike" for after in ("None", "False")},
    **{(_TR, "x_train", _TASK, _TASK.replace(*change)): why for change, why in (
        (('"train", total', 'None, total'), _NO_DESCRIPTION), (('"train"', '"XXtrainXX"'), _NO_DESCRIPTION),
        (('"train"', '"TRAIN"'), _NO_DESCRIPTION), (('loss="…"', "loss=None"), _FIRST_FIELDS),
        (('held="…"', "held=None"), _FIRST_FIELDS), (('loss="…"', 'loss="XX…XX"'), _FIRST_FIELDS),
        (('held="…"', 'held="XX…XX"'), _FIRST_FIELDS))},
    (_TR, "x_train", "def train(out: Path, steps: int = STEPS, seed: int = 0, curve: Path | None = CURVE, sizes: dict = SIZES,",
     "def train(out: Path, steps: int = STEPS, seed: int = 1, curve: Path | None = CURVE, sizes: dict = SIZES,"):
        "the command hands train() its --seed, whose own default is 0, and every check names its seed: train()'s "
        "default is never read",
}

_MU = "course/authoring/mutation.py"
_MU_SEGMENT = "ast.get_source_segment gives None only for a node without positions, and ast.parse gives every node its own"
_MU_STAND_IN = ("the docstring's stand-in, a Pass or None: either way the digest no longer depends on the docstring's text, "
                "and still on the code")
_MU_NAMELESS = ("a call through an attribute (console.status, err.print) has no bare name; \"XXXX\" is no more an "
                "exception's name than \"\" is")
_MU_NEVER_SAME = ("changed's first value is returned only when no constant differs and nothing else does: a mutant always "
                  "differs somewhere, and every other difference returns False first")
_MU_STRICT = "strict=False is zip's default, and None is as false"
_MU_LONGER = ("a tree with more nodes has a longer list in some node, which the walk meets (and refuses) before either "
              "walk runs out: zip never reaches the end of a longer one, and the final count never decides")
_MU_MINUS_FIRST = ("a unified diff lists a hunk's removed lines before its added ones, and every mutant removes one: the first "
                   "change met is a '-'")
_MU_DEDENTED = "list_mutants dedents the function's text first: its def line starts the line, stripped or not"
_MU_POSIX_LINK = "only Windows tells a link to a folder from a link to a file; POSIX ignores target_is_directory"
_MU_ASCII = ("what is written is ASCII (JSON's escapes, the plugin's and the preload's code, a number of seconds): the same "
             "bytes in every encoding")
_MU_JOIN_ONE = "\" / \".join of one line is that line"
_MU_FILENAME = "mutmut names the file only in its own error messages, and its last two parameters default to None"
_MU_NO_ANCHORS = ("the course's own files hold no `# ANCHOR: name | stub:` block (only solutions do): todo_lines finds no TODO "
                  "in them, and every mutated function is in starts")
_MU_ONE_MARK = "a mutant's name holds \"__mutmut_\" once: every split gives the same function"
_MU_FLUSH = ("print's flush matters only when stdout is a pipe, where the line would show after mutmut's run rather than "
             "before it; in the checks' process print writes to a buffer")
_MU_CHECK = "check=False is subprocess.run's default, and None is as false: mutmut's exit code is read either way"
_MU_META = "mutmut writes its .meta files with JSON's ASCII escapes (a method's ǁ is \\u01c1): any encoding reads them"
_MU_TRUNCATE = "int() of a positive quotient drops its fraction as // does: the same whole minutes"
_MU_EVERY_SOLUTION = ("every solution is a target (TARGETS lists steps 01 to 26), so the widest name is a target's: the "
                      "column is as wide")
_MU_ONCE = "a summary holds each heading once: the first is the last"
_MU_FALSE = "None and [] are both false: a target without a row is skipped alike"
_MU_NO_SUMMARY = "kept_lines finds no target's line in \"XXXX\" as in \"\": a first summary keeps nothing"
_MU_CASE = "a distribution's name is compared without case: version('MUTMUT') is mutmut's"
_MU_GIT_RUN = 'str(SUMMARY.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True, timeout=60)'
_MU_STATUS_READ = 'for line in SUMMARY.read_text(encoding="utf-8").splitlines():'
_MUTATION = {
    **{(_MU, "x_measured_at", _MU_GIT_RUN, _MU_GIT_RUN.replace("timeout=60", after)):
       "git log of one file's history ends in well under a second; the timeout bounds only a git that hangs (a check "
       "fakes one)" for after in ("timeout=None", "", "timeout=61")},
    (_MU, "x_status", _MU_STATUS_READ, _MU_STATUS_READ.replace('"utf-8"', '"UTF-8"')): _UTF8_NAME,
    (_MU, "x_status", _MU_STATUS_READ, _MU_STATUS_READ.replace('"utf-8"', "None")):
        "status() reads only the table's rows, which are ASCII: any locale's encoding reads them alike",
    **{(_MU, function, before, after): why for function, before, after, why in (
        ('x_digest', 'text = source.decode("utf-8")',
         'text = source.decode("UTF-8")', _UTF8_NAME),
        ('x_prepare', 'with open(work / "pyproject.toml", "a", encoding="utf-8") as pyproject:',
         'with open(work / "pyproject.toml", "a", encoding="UTF-8") as pyproject:', _UTF8_NAME),
        ('x_prepare', '(work / "mutation_plugin.py").write_text(PLUGIN, encoding="utf-8")',
         '(work / "mutation_plugin.py").write_text(PLUGIN, encoding="UTF-8")', _UTF8_NAME),
        ('x_prepare', '(work / "mutation_preload.txt").write_text("\\n".join(PRELOAD) + "\\n", encoding="utf-8")',
         '(work / "mutation_preload.txt").write_text("\\n".join(PRELOAD) + "\\n", encoding="UTF-8")', _UTF8_NAME),
        ('x_list_mutants', 'text = Path(path).read_text(encoding="utf-8")',
         'text = Path(path).read_text(encoding="UTF-8")', _UTF8_NAME),
        ('x_run', 'with open(work / "mutmut.log", "w", encoding="utf-8") as log:  # mutmut\'s own progress, for a post-mortem',
         'with open(work / "mutmut.log", "w", encoding="UTF-8") as log:  # mutmut\'s own progress, for a post-mortem', _UTF8_NAME),
        ('x_run', '(work / "run-seconds.txt").write_text(f"{result.seconds:.0f}\\n", encoding="utf-8")',
         '(work / "run-seconds.txt").write_text(f"{result.seconds:.0f}\\n", encoding="UTF-8")', _UTF8_NAME),
        ('x__read_verdicts', 'meta = json.loads((work / "mutants" / f"{_in_copy(target)}.meta").read_text(encoding="utf-8"))',
         'meta = json.loads((work / "mutants" / f"{_in_copy(target)}.meta").read_text(encoding="UTF-8"))', _UTF8_NAME),
        ('x_recorded', 'for line in SUMMARY.read_text(encoding="utf-8").splitlines():',
         'for line in SUMMARY.read_text(encoding="UTF-8").splitlines():', _UTF8_NAME),
        ('x_main', 'old = SUMMARY.read_text(encoding="utf-8") if SUMMARY.is_file() else ""',
         'old = SUMMARY.read_text(encoding="UTF-8") if SUMMARY.is_file() else ""', _UTF8_NAME),
        ('x_main', 'SUMMARY.write_text(text, encoding="utf-8")',
         'SUMMARY.write_text(text, encoding="UTF-8")', _UTF8_NAME),
        ('x_digest', 'and re.match(r"[rRuU]?(?:\'\\\'\\\'|\\"\\"\\")", ast.get_source_segment(text, first) or "")):',
         'and re.match(r"[rRuU]?(?:\'\\\'\\\'|\\"\\"\\")", ast.get_source_segment(text, first) or "XXXX")):', _MU_SEGMENT),
        ('x_digest', 'node.body[0] = ast.Pass()',
         'node.body[0] = None', _MU_STAND_IN),
        ('x__message_strings', 'name = node.func.id if isinstance(node.func, ast.Name) else ""',
         'name = node.func.id if isinstance(node.func, ast.Name) else "XXXX"', _MU_NAMELESS),
        ('x_rewords_a_message', 'changed = False',
         'changed = None', _MU_NEVER_SAME),
        ('x_rewords_a_message', 'changed = False',
         'changed = True', _MU_NEVER_SAME),
        ('x_rewords_a_message', 'for x, y in zip(ast.walk(a), ast.walk(b), strict=False):',
         'for x, y in zip(ast.walk(a), ast.walk(b), strict=None):', _MU_STRICT),
        ('x_rewords_a_message', 'for x, y in zip(ast.walk(a), ast.walk(b), strict=False):',
         'for x, y in zip(ast.walk(a), ast.walk(b), ):', _MU_STRICT),
        ('x_rewords_a_message', 'for x, y in zip(ast.walk(a), ast.walk(b), strict=False):',
         'for x, y in zip(ast.walk(a), ast.walk(b), strict=True):', _MU_LONGER),
        ('x_rewords_a_message', 'return changed and len(list(ast.walk(a))) == len(list(ast.walk(b)))',
         'return changed or len(list(ast.walk(a))) == len(list(ast.walk(b)))', _MU_LONGER),
        ('x__changed_line', 'if line.startswith(("-", "+")):',
         'if line.startswith(("-", "XX+XX")):', _MU_MINUS_FIRST),
        ('x__changed_line', 'defined = next(i for i, line in enumerate(original.splitlines()) if line.lstrip().startswith(("def ", "async def ")))',
         'defined = next(i for i, line in enumerate(original.splitlines()) if line.rstrip().startswith(("def ", "async def ")))', _MU_DEDENTED),
        ('x_prepare', '(folder / "solutions").symlink_to("src", target_is_directory=True)',
         '(folder / "solutions").symlink_to("src", target_is_directory=None)', _MU_POSIX_LINK),
        ('x_prepare', '(folder / "solutions").symlink_to("src", target_is_directory=True)',
         '(folder / "solutions").symlink_to("src", )', _MU_POSIX_LINK),
        ('x_prepare', '(folder / "solutions").symlink_to("src", target_is_directory=True)',
         '(folder / "solutions").symlink_to("src", target_is_directory=False)', _MU_POSIX_LINK),
        ('x_prepare', 'with open(work / "pyproject.toml", "a", encoding="utf-8") as pyproject:',
         'with open(work / "pyproject.toml", "a", encoding=None) as pyproject:', _MU_ASCII),
        ('x_prepare', 'with open(work / "pyproject.toml", "a", encoding="utf-8") as pyproject:',
         'with open(work / "pyproject.toml", "a", ) as pyproject:', _MU_ASCII),
        ('x_prepare', '(work / "mutation_plugin.py").write_text(PLUGIN, encoding="utf-8")',
         '(work / "mutation_plugin.py").write_text(PLUGIN, encoding=None)', _MU_ASCII),
        ('x_prepare', '(work / "mutation_plugin.py").write_text(PLUGIN, encoding="utf-8")',
         '(work / "mutation_plugin.py").write_text(PLUGIN, )', _MU_ASCII),
        ('x_prepare', '(work / "mutation_preload.txt").write_text("\\n".join(PRELOAD) + "\\n", encoding="utf-8")',
         '(work / "mutation_preload.txt").write_text("\\n".join(PRELOAD) + "\\n", encoding=None)', _MU_ASCII),
        ('x_prepare', '(work / "mutation_preload.txt").write_text("\\n".join(PRELOAD) + "\\n", encoding="utf-8")',
         '(work / "mutation_preload.txt").write_text("\\n".join(PRELOAD) + "\\n", )', _MU_ASCII),
        ('x_run', '(work / "run-seconds.txt").write_text(f"{result.seconds:.0f}\\n", encoding="utf-8")',
         '(work / "run-seconds.txt").write_text(f"{result.seconds:.0f}\\n", encoding=None)', _MU_ASCII),
        ('x_run', '(work / "run-seconds.txt").write_text(f"{result.seconds:.0f}\\n", encoding="utf-8")',
         '(work / "run-seconds.txt").write_text(f"{result.seconds:.0f}\\n", )', _MU_ASCII),
        ('x__changed_lines', 'return (removed[0] if len(removed) == 1 else " / ".join(removed)), (added[0] if len(added) == 1 else " / ".join(added))',
         'return (removed[0] if (len(removed) == 1) and False else " / ".join(removed)), (added[0] if len(added) == 1 else " / ".join(added))', _MU_JOIN_ONE),
        ('x__changed_lines', 'return (removed[0] if len(removed) == 1 else " / ".join(removed)), (added[0] if len(added) == 1 else " / ".join(added))',
         'return (removed[0] if len(removed) == 1 else " / ".join(removed)), (added[0] if (len(added) == 1) and False else " / ".join(added))', _MU_JOIN_ONE),
        ('x_list_mutants', 'mutated = mutate_file_contents(path, text, None, None)',
         'mutated = mutate_file_contents(None, text, None, None)', _MU_FILENAME),
        ('x_list_mutants', 'mutated = mutate_file_contents(path, text, None, None)',
         'mutated = mutate_file_contents(path, text, None)', _MU_FILENAME),
        ('x_list_mutants', 'mutated = mutate_file_contents(path, text, None, None)',
         'mutated = mutate_file_contents(path, text, None, )', _MU_FILENAME),
        ('x_list_mutants', 'todos = todo_lines(text) if target.startswith("solutions/") else {}',
         'todos = todo_lines(text) if (target.startswith("solutions/")) or True else {}', _MU_NO_ANCHORS),
        ('x_list_mutants', 'if todos and mutant.function in starts:',
         'if todos or mutant.function in starts:', _MU_NO_ANCHORS),
        ('x_list_mutants', 'mutant = Mutant(key, name.rsplit("__mutmut_", 1)[0], before, after, diff)',
         'mutant = Mutant(key, name.rsplit("__mutmut_", )[0], before, after, diff)', _MU_ONE_MARK),
        ('x_list_mutants', 'mutant = Mutant(key, name.rsplit("__mutmut_", 1)[0], before, after, diff)',
         'mutant = Mutant(key, name.split("__mutmut_", 1)[0], before, after, diff)', _MU_ONE_MARK),
        ('x_list_mutants', 'mutant = Mutant(key, name.rsplit("__mutmut_", 1)[0], before, after, diff)',
         'mutant = Mutant(key, name.rsplit("__mutmut_", 2)[0], before, after, diff)', _MU_ONE_MARK),
        ('x_run', 'f"listed as equivalent; mutmut runs the other {len(names)} under {\', \'.join(TARGETS[target])}", flush=True)',
         'f"listed as equivalent; mutmut runs the other {len(names)} under {\', \'.join(TARGETS[target])}", flush=None)', _MU_FLUSH),
        ('x_run', 'f"listed as equivalent; mutmut runs the other {len(names)} under {\', \'.join(TARGETS[target])}", flush=True)',
         'f"listed as equivalent; mutmut runs the other {len(names)} under {\', \'.join(TARGETS[target])}", )', _MU_FLUSH),
        ('x_run', 'f"listed as equivalent; mutmut runs the other {len(names)} under {\', \'.join(TARGETS[target])}", flush=True)',
         'f"listed as equivalent; mutmut runs the other {len(names)} under {\', \'.join(TARGETS[target])}", flush=False)', _MU_FLUSH),
        ('x_run', 'stdout=log, stderr=subprocess.STDOUT, check=False)',
         'stdout=log, stderr=subprocess.STDOUT, check=None)', _MU_CHECK),
        ('x_run', 'stdout=log, stderr=subprocess.STDOUT, check=False)',
         'stdout=log, stderr=subprocess.STDOUT, )', _MU_CHECK),
        ('x__read_verdicts', 'meta = json.loads((work / "mutants" / f"{_in_copy(target)}.meta").read_text(encoding="utf-8"))',
         'meta = json.loads((work / "mutants" / f"{_in_copy(target)}.meta").read_text(encoding=None))', _MU_META),
        ('x__minutes', 'return f"{int(seconds // 60)} min {int(seconds % 60)} s"',
         'return f"{int(seconds / 60)} min {int(seconds % 60)} s"', _MU_TRUNCATE),
        ('x_summary', 'width = max(len(name) for name in [*TARGETS, *(f"solutions/{path.name}" for path in SOLUTIONS.glob("*.py"))])',
         'width = max(len(name) for name in [*TARGETS, *(f"solutions/{path.name}" for path in SOLUTIONS.glob("XX*.pyXX"))])', _MU_EVERY_SOLUTION),
        ('x_summary', 'width = max(len(name) for name in [*TARGETS, *(f"solutions/{path.name}" for path in SOLUTIONS.glob("*.py"))])',
         'width = max(len(name) for name in [*TARGETS, *(f"solutions/{path.name}" for path in SOLUTIONS.glob("*.PY"))])', _MU_EVERY_SOLUTION),
        ('x_kept_lines', 'table, _, rest = text.partition(f"\\n{EQUIVALENT_HEADING}\\n")',
         'table, _, rest = text.rpartition(f"\\n{EQUIVALENT_HEADING}\\n")', _MU_ONCE),
        ('x_kept_lines', 'equivalent, _, left = rest.partition(f"\\n{LEFT_HEADING}")',
         'equivalent, _, left = rest.rpartition(f"\\n{LEFT_HEADING}")', _MU_ONCE),
        ('x_kept_lines', 'rows = []',
         'rows = None', _MU_FALSE),
        ('x_main', 'old = SUMMARY.read_text(encoding="utf-8") if SUMMARY.is_file() else ""',
         'old = SUMMARY.read_text(encoding="utf-8") if SUMMARY.is_file() else "XXXX"', _MU_NO_SUMMARY),
        ('x_main', 'text = summary(results, args.children, kept_lines(old, others), f"mutmut {importlib.metadata.version(\'mutmut\')}")',
         'text = summary(results, args.children, kept_lines(old, others), f"mutmut {importlib.metadata.version(\'MUTMUT\')}")', _MU_CASE),
    )},
}

_PYTEST_PLUGIN = {
    ("course/check/pytest_plugin.py", "x_pytest_configure", 'config.option.reportchars += "s"',
     'config.option.reportchars += "S"'): "pytest reads -rS as -rs (an old alias it lowercases)",
}

#: Mutants no test should see: (file, function, the line as written, the line as mutated) -> why.
#: The lines are stripped; a function is mutmut's name for it (``x_find``, ``xǁCheckpointǁcheck``).
_EXPLAINED: dict[tuple[str, str, str, str], str] = {
    **{(_CK, function, line, line.replace('"utf-8"', '"UTF-8"')): _UTF8_NAME
       for function, line in (
           ("xǁCheckpointǁconfig_of", 'values = json.loads(path.read_text(encoding="utf-8"))'),
           ("x_read_files", 'vocab = json.loads(Path(vocab_json).read_text(encoding="utf-8"))'),
           ("x_read_files", 'lines = Path(merges_txt).read_text(encoding="utf-8").splitlines() if merges_txt else []'),
           ("x__from_tokenizer_json", 'data = json.loads(path.read_text(encoding="utf-8"))'))},
    (_CK, "x_default_model", 'why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(hf_hub_url(SIZES[0], CONFIG))',
     'why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(hf_hub_url(None, CONFIG))'): _ANY_REPO,
    (_CK, "x_default_model", 'why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(hf_hub_url(SIZES[0], CONFIG))',
     'why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(hf_hub_url(SIZES[1], CONFIG))'): _ANY_REPO,
    (_CK, "x__download", 'why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(hf_hub_url(model, CONFIG))',
     'why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else _unreachable(hf_hub_url(None, CONFIG))'): _ANY_REPO,
    (_CK, "x__download", 'f"{one_line(error)[:200]}") from None', 'f"{one_line(error)[:201]}") from None'): _CAP,
    (_CK, "x__download", 'raise CheckpointError(f"downloading {model!r} failed: {one_line(error)[:300]}; {how}") from None',
     'raise CheckpointError(f"downloading {model!r} failed: {one_line(error)[:301]}; {how}") from None'): _CAP,
    **{(_CK, "x__unreachable", 'urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()',
        'urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()'.replace(*change)): why
       for change, why in (((', method="HEAD"', ', method=None'), _ANY_METHOD), ((', method="HEAD"', ', '), _ANY_METHOD),
                           (('"HEAD"', '"XXHEADXX"'), _ANY_METHOD), (('"HEAD"', '"head"'), _ANY_METHOD),
                           (("timeout=timeout", "timeout=None"), _JOIN), (("timeout=timeout", ""), _JOIN))},
    (_CK, "x_check_tied_head", 'f"max |Δ| {float(np.max(np.abs(head.astype(np.float64) - wte))):.3g}")',
     'f"max |Δ| {float(np.max(np.abs(head.astype(None) - wte))):.3g}")'):
        "NumPy reads the dtype None as float64: the same subtraction",
    (_CK, "x__tokenizer", "vocab, merges = read_files(vocab_json, merges_txt if with_merges else None)",
     "vocab, merges = read_files(vocab_json, merges_txt if (with_merges) or True else None)"):
        "vocabulary_size then parses merges.txt too and counts the same tokens; only a damaged merges.txt is refused "
        "by load_pretrained instead of by step 12's Tokenizer.from_dir, with the same message",
    (_CK, "x__from_tokenizer_json",
     'merges = [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]]',
     'merges = [tuple(merge.split(None)) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]]'):
        "a byte-level BPE's tokens hold no whitespace (every byte has a printable stand-in), so a merge splits "
        "alike on ' ' and on any whitespace",
    **{(_CK, "x_read_weights", 'loaded = torch.load(path, map_location="cpu", weights_only=True)', after):
       "PyTorch loads weights_only by default since 2.6 (the course's is 2.13): the same refusal of a pickle that is "
       "more than tensors" for after in ('loaded = torch.load(path, map_location="cpu", weights_only=None)',
                                          'loaded = torch.load(path, map_location="cpu", )')},
    **{(_CK, "x__unreachable", "probe = threading.Thread(target=ask, daemon=True)", f"probe = threading.Thread(target=ask, {after})"): _DAEMON
       for after in ("daemon=None", "", "daemon=False")},
    ("course/weights.py", "x_random_checkpoint",
     "model.load_state_dict({name: torch.from_numpy(value) for name, value in values.items()}, strict=False)",
     "model.load_state_dict({name: torch.from_numpy(value) for name, value in values.items()}, strict=None)"):
        "load_state_dict reads strict as a truth value: None is False, and the tied lm_head is left out alike",
    **_Q4K,
    **_Q6K,
    **_STEP_02,
    **_STEP_03,
    **_STEP_07,
    **_STEPS_18_19,
    **_STEPS_20_22,
    **_STEP_25,
    **_FRONT_DOOR,
    **_SERVE_PROGRAM,
    **_STEP_12,
    **_STEP_13,
    **_GENERATE,
    **_STEP_15,
    **_STEP_16,
    **_RUNTIME,
    **_HINTS,
    **_RUNNER,
    **_BUILD,
    **_LLAMA,
    **_PYTEST_PLUGIN,
    **_BENCH,
    **_RENDER,
    **_DIAGRAMS,
    **_OP_PROFILE,
    **_ONE_ROW,
    **_EXPERIMENTS,
    **_TRAIN,
    **_MUTATION,
}

_ROADS_ON_A_GPU = "tests/test_programs.py::test_every_road_runs_on_the_gpu_it_is_given"
_BENCH_ON_A_GPU = "tests/test_bench.py::test_each_worker_runs_on_the_gpu_with_hugging_faces_tokens"
#: The reasons that only a GPU machine could tell, each with the ``gpu``-marked check that sees their mutants where
#: a GPU is (it skips, saying so, where none is): a device or dtype left to MAX's or PyTorch's default, a road
#: reached only with ``--device gpu``.
NEEDS_A_GPU: dict[str, str] = {
    _NO_GPU: _ROADS_ON_A_GPU,
    _ONLY_CPU: _ROADS_ON_A_GPU,
    _TORCH_CPU: _BENCH_ON_A_GPU,
    _GPU_ONLY: _BENCH_ON_A_GPU,
    _PINNED_DEVICE: "tests/test_course.py::test_setup_keeps_the_cpu_and_float32_beside_a_gpu",
    _PINNED_DTYPE: "tests/test_course.py::test_setup_keeps_the_cpu_and_float32_beside_a_gpu",
}
#: Mutants no check on a machine without a GPU can see, CI's included: untested here, not equivalent. Each with
#: its reason and the check that would kill it (the summary lists them apart, under their own heading).
UNTESTED: dict[tuple[str, str, str, str], tuple[str, str]] = {
    key: (reason, NEEDS_A_GPU[reason]) for key, reason in _EXPLAINED.items() if reason in NEEDS_A_GPU}
#: The mutants no check should see, each with the reason why.
EQUIVALENT: dict[tuple[str, str, str, str], str] = {
    key: reason for key, reason in _EXPLAINED.items() if reason not in NEEDS_A_GPU}
