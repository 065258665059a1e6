"""The shipped models' validation curves: read from every seed's training log, drawn in one figure."""

import json

from circuitlab.demo.readers import validation_curves, validation_curves_figure


def write_log(path, evaluations, extra_lines=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": step, "loss": 9.0, "tokens_seen": step * 100}) for step in range(1, 6)]
    lines += [json.dumps({"step": step, "loss": 8.0, "tokens_seen": step * 100, "eval_loss": loss})
              for step, loss in evaluations]
    path.write_text("\n".join([*lines, *extra_lines]) + "\n")


def test_curves_hold_each_seeds_evaluations_and_the_figure_one_trace_per_seed(tmp_path):
    models, results = tmp_path / "models", tmp_path / "results"
    write_log(models / "a" / "train_log.jsonl", [(10, 4.0), (20, 3.5)], ['{"step": 21, "loss"'])  # a cut line
    write_log(results / "b" / "seed0" / "train_log.jsonl", [(10, 5.5)])  # a kept seed 0 wins over the folder's
    write_log(results / "a" / "seed2" / "train_log.jsonl", [(10, 4.2), (20, 3.7), (30, 3.6)])
    write_log(models / "b" / "train_log.jsonl", [(10, 5.0)])
    assert validation_curves(models, results, ["b"])["loss"].tolist() == [5.5]
    (results / "b" / "seed0" / "train_log.jsonl").unlink()
    (models / "c").mkdir(parents=True)  # no log at all: left out
    curves = validation_curves(models, results, ["a", "b", "c"])
    assert curves[["model", "seed"]].drop_duplicates().values.tolist() == [["a", 0], ["a", 2], ["b", 0]]
    a0 = curves[(curves.model == "a") & (curves.seed == 0)]
    assert a0["loss"].tolist() == [4.0, 3.5] and a0["tokens"].tolist() == [1000, 2000]
    assert curves[(curves.model == "a") & (curves.seed == 2)]["loss"].tolist() == [4.2, 3.7, 3.6]
    figure = validation_curves_figure(curves)
    assert [(trace.name, trace.line.dash) for trace in figure.data] == [
        ("a", "solid"), ("a (seed 2)", "dot"), ("b", "solid")]
    assert list(figure.data[1].y) == [4.2, 3.7, 3.6] and list(figure.data[0].x) == [0.001, 0.002]
    assert figure.data[0].line.color == figure.data[1].line.color != figure.data[2].line.color
    assert len(validation_curves(models, results, ["c"])) == 0
