import random

import pytest

from dilaserve.tasks import BLOCK_LENGTH, TASKS, get_task, task_suite
from dilaserve.tasks.arith import NUMBER_WORDS


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_sampled_answer_is_accepted(name):
    task, rng = TASKS[name], random.Random(0)
    for _ in range(200):
        inst = task.sample(rng)
        ans = [tok for item in task.sample_answer_items(inst, rng) for tok in item]
        assert task.grade(inst, ans)
        assert task.grade(inst, " ".join(ans))
        assert len(ans) == inst.answer_length < inst.gen_length


@pytest.mark.parametrize("name", sorted(TASKS))
def test_grader_rejects_duplicates_omissions_and_mixed_forms(name):
    task, rng = TASKS[name], random.Random(1)
    inst = task.sample(rng, size=max(task.sizes))
    items = [list(i) for i in inst.items]
    flat = [t for i in items for t in i]
    assert not task.grade(inst, flat[: -len(items[-1])])  # an item missing
    dup = [t for i in items[:-1] + [items[0]] for t in i]
    assert not task.grade(inst, dup)  # an item twice, another missing
    assert not task.grade(inst, flat + items[0])  # an extra item
    assert not task.grade(inst, [])


def test_mixed_forms_inside_an_item_are_rejected():
    task = get_task("pairs")
    inst = task.sample(random.Random(2), size=2)
    (a, _, b, _), _ = inst.alternatives[0]
    rest = [t for i in inst.items[1:] for t in i]
    assert task.grade(inst, [a, ">", b, ","] + rest)
    assert task.grade(inst, [b, "<", a, ","] + rest)
    assert not task.grade(inst, [a, "<", b, ","] + rest)  # half of each form


def test_arith_accepts_swapped_commutative_operands():
    task = get_task("arith")
    rng = random.Random(3)
    inst = next(i for i in (task.sample(rng, 1) for _ in range(100)) if len(i.alternatives[0]) > 1)
    for form in inst.alternatives[0]:
        assert task.grade(inst, list(form))
    word, a, op, b, _, x = inst.items[0][:6]
    assert int(x) == eval(f"{a}{op}{b}")
    _, _, op1, b1, op2, c, _, *numbers = inst.prompt.split()
    assert (op, b) == (op1, b1) and numbers == [word] and NUMBER_WORDS[int(a)] == word


def test_arith_items_open_with_distinct_number_words_and_nothing_else_is_a_word():
    task, rng = get_task("arith"), random.Random(4)
    for _ in range(200):
        inst = task.sample(rng, max(task.sizes))
        words, starts = [i[0] for i in inst.items], [i[1] for i in inst.items]
        assert len(set(starts)) == len(starts) == max(task.sizes)
        assert words == [NUMBER_WORDS[int(a)] for a in starts]
        assert not any(t.isalpha() for i in inst.items for t in i[1:])
        assert all(len(t) == 1 for i in inst.items for t in i[1:])


def test_arith_takes_its_items_in_the_prompts_order_and_the_others_in_any():
    rng = random.Random(5)
    arith = get_task("arith")
    inst = arith.sample(rng, 4)
    words = inst.prompt.split(":")[-1].split()
    assert [i[0] for i in inst.items] == words  # the canonical answer follows the prompt
    for _ in range(20):
        assert [i[0] for i in arith.sample_answer_items(inst, rng)] == words
    swapped = [t for i in (inst.items[1], inst.items[0], *inst.items[2:]) for t in i]
    verdict = arith.verdict(inst, swapped)
    assert not verdict.correct and verdict.first_wrong == " ".join(inst.items[1])
    assert "in this order" in verdict.markdown()
    letters = get_task("list")
    inst = letters.sample(rng, 5)
    assert letters.grade(inst, [t for i in reversed(inst.items) for t in i])
    assert "in any order" in letters.verdict(inst, []).markdown()


def test_no_pairs_letter_is_the_successor_of_another():
    """A letter that is also another item's successor would make a written item look done."""
    from dilaserve.tasks.pairs import LETTERS

    task, rng = get_task("pairs"), random.Random(6)
    for _ in range(300):
        letters = task.sample(rng, max(task.sizes)).prompt.split()[2:]
        succ = {LETTERS[(LETTERS.index(c) + 1) % 26] for c in letters}
        assert len(set(letters)) == len(letters) and not succ & set(letters)


def test_answers_span_one_to_four_blocks():
    blocks = {i.gen_length // BLOCK_LENGTH for i in task_suite(60, seed=0)}
    assert blocks == {1, 2, 3, 4}


def test_unknown_task_has_clear_error():
    with pytest.raises(ValueError, match="choose one of"):
        get_task("nope")
