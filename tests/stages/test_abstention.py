from __future__ import annotations

import pytest

from rag.stages.abstention import NOTHING_SELECTED, abstain, abstention_text, decide_abstention, final_answer
from rag.stages.answer_type import check_answer_types, vouched_evidence
from rag.types import Abstention, Coverage, Evidence, Generated, Intent, covered_intents
from tests.stages.factories import make_candidate

TWO = [Intent(0, "What is the refund window"), Intent(1, "can I refund a gift card?")]


def test_answers_when_every_intent_has_a_strong_passage() -> None:
    reranked = [
        make_candidate("a", ordinal=0, rerank=0.9, intents=(0,)),
        make_candidate("b", ordinal=1, rerank=0.6, intents=(1,)),
    ]
    assert decide_abstention(reranked, TWO, threshold=0.5) == Coverage(False, (), None)


def test_abstains_when_nothing_clears_the_threshold() -> None:
    reranked = [make_candidate("a", ordinal=0, rerank=0.3, intents=(0, 1))]
    coverage = decide_abstention(reranked, TWO, threshold=0.5)
    assert coverage.abstain and coverage.uncovered == tuple(TWO)
    assert coverage.reason == "no passage scored high enough to answer it"


def test_abstains_when_nothing_was_retrieved() -> None:
    coverage = decide_abstention([], TWO, threshold=0.5)
    assert coverage == Coverage(True, tuple(TWO), "no passages were retrieved")


def test_partial_coverage_names_the_missing_intent() -> None:
    reranked = [
        make_candidate("a", ordinal=0, rerank=0.9, intents=(0,)),
        make_candidate("b", ordinal=1, rerank=0.2, intents=(1,)),
    ]
    coverage = decide_abstention(reranked, TWO, threshold=0.5)
    assert not coverage.abstain and coverage.uncovered == (TWO[1],)
    assert coverage.reason == 'no passage scored high enough to answer "can I refund a gift card?"'


def test_a_strong_passage_counts_only_for_the_intents_it_was_retrieved_for() -> None:
    reranked = [make_candidate("a", ordinal=0, rerank=5.0, intents=(1,))]
    assert decide_abstention(reranked, TWO, threshold=0.5).uncovered == (TWO[0],)


def test_the_threshold_is_inclusive_and_falls_back_to_fused_scores() -> None:
    reranked = [make_candidate("a", ordinal=0, fused=0.5, intents=(0,))]
    assert decide_abstention(reranked, [TWO[0]], threshold=0.5) == Coverage(False)


def test_untagged_candidates_count_for_the_first_intent() -> None:
    reranked = [make_candidate("a", ordinal=0, rerank=0.9, intents=())]
    assert decide_abstention(reranked, [Intent(0, "q")], threshold=0.5) == Coverage(False)


def test_evidence_is_selected_for_the_covered_intents_or_for_all_when_none_is() -> None:
    assert covered_intents(TWO, [TWO[1]]) == [TWO[0]]
    assert covered_intents(TWO, []) == TWO
    assert covered_intents(TWO, TWO) == TWO
    assert Coverage(False, (TWO[0],)).covered(TWO) == [TWO[1]]


# ------------------------------------------------------------------------------ the abstention and the answer
def test_the_coverage_decides_the_abstention_and_its_reason() -> None:
    full = Coverage(True, tuple(TWO), "no passages were retrieved")
    assert abstain(full, has_evidence=True) == Abstention("no passages were retrieved")
    assert abstain(Coverage(False), has_evidence=True) is None
    assert abstain(Coverage(False, (TWO[1],), "partial"), has_evidence=True) is None


def test_no_evidence_abstains_with_the_coverage_reason_or_the_default() -> None:
    assert abstain(Coverage(False), has_evidence=False) == Abstention(NOTHING_SELECTED)
    assert NOTHING_SELECTED == "no passage was retrieved"
    # a partial coverage's reason is what the user reads when no evidence could be selected
    assert abstain(Coverage(False, (TWO[1],), "partial"), has_evidence=False) == Abstention("partial")
    assert abstain(Coverage(True, tuple(TWO), ""), has_evidence=False) == Abstention(NOTHING_SELECTED)


def test_an_abstaining_answer_is_the_abstention_text() -> None:
    generated = Generated(text="", model="none")
    everything = Coverage(True, tuple(TWO), "why")
    text = final_answer("q", TWO, everything, generated, Abstention("why"))
    assert text == abstention_text("q", TWO, TWO)
    # nothing marked uncovered (no evidence selected): the whole question is named
    one = [Intent(0, "What is the dress code?")]
    text = final_answer("What is the dress code?", one, Coverage(False), generated, Abstention("x"))
    assert (
        text
        == 'I can\'t answer this from the policies you have access to: I found no passage that answers "What is the dress code?".'
    )


def test_an_answer_names_the_parts_it_does_not_cover() -> None:
    partial = Coverage(False, (TWO[1],), "partial")
    text = final_answer("q", TWO, partial, Generated(text="45 days [1].", model="m"), None)
    assert text == '45 days [1].\n\nI could not find anything about: "can I refund a gift card?".'
    assert final_answer("q", TWO, Coverage(False), Generated(text="45 days [1].", model="m"), None) == (
        "45 days [1]."
    )


def test_a_failed_generation_keeps_its_fallback_text_alone() -> None:
    partial = Coverage(False, (TWO[1],), "partial")
    failed = Generated(text="Quoted [1].", model="extractive (fallback)", error="timeout")
    assert final_answer("q", TWO, partial, failed, None) == "Quoted [1]."


# ------------------------------------------------------------------------------------------- answer types
AUDIT = Intent(0, "How many years must we keep audit logs?")
REFUND = Intent(1, "can I refund a gift card?")
LEAVE = ["Employees receive 25 days of paid annual leave."]


def test_answer_types_leave_an_answerable_question_covered() -> None:
    coverage = Coverage(False)
    checked = check_answer_types("q", [REFUND], coverage, ["Gift cards are not refundable."])
    assert checked.coverage == coverage and checked.missing == ()


def test_answer_types_uncover_an_intent_the_evidence_cannot_answer() -> None:
    intents = [AUDIT, REFUND]
    checked = check_answer_types("q", intents, Coverage(False), [*LEAVE, "Gift cards are not refundable."])
    why = "no passage states a number of years for what the question asks about"
    assert checked.missing == ((AUDIT, why),)
    assert checked.coverage == Coverage(False, (AUDIT,), None)  # partly answered: no abstention


def test_answer_types_abstain_with_the_checks_reasons_when_nothing_is_left() -> None:
    severance = Intent(1, "Is there any severance pay?")
    checked = check_answer_types("q", [AUDIT, severance], Coverage(False), LEAVE, pool=LEAVE)
    reasons = [
        "no passage states a number of years for what the question asks about",
        'no passage mentions "severance pay"',
    ]
    assert [why for _, why in checked.missing] == reasons
    assert checked.coverage == Coverage(True, (AUDIT, severance), "; ".join(reasons))


def test_answer_types_include_the_choice_check() -> None:
    rto = Intent(0, "Is the recovery time objective 24 hours or 72 hours?")
    checked = check_answer_types("q", [rto], Coverage(False), ["The RTO is the longest tolerable outage."])
    assert checked.coverage == Coverage(True, (rto,), "no passage states 24 hours or 72 hours")
    stated = check_answer_types("q", [rto], Coverage(False), ["The recovery time objective is 24 hours."])
    assert stated.missing == ()


def test_answer_types_skip_intents_already_uncovered_and_keep_the_earlier_reason() -> None:
    earlier = Coverage(False, (AUDIT,), 'no passage scored high enough to answer "audit"')
    checked = check_answer_types("q", [AUDIT, REFUND], earlier, LEAVE)
    assert checked.missing == () and checked.coverage == earlier
    # the last covered intent failing abstains; the reason is this stage's only
    severance = Intent(1, "Is there any severance pay?")
    checked = check_answer_types("q", [AUDIT, severance], earlier, LEAVE, pool=LEAVE)
    assert checked.coverage == Coverage(True, (AUDIT, severance), 'no passage mentions "severance pay"')


def test_answer_types_pass_the_scorer_and_the_question_to_the_checks() -> None:
    topicless = Intent(1, "how much?")
    evidence = ["The 401(k) plan is run by SocialK."]
    question = "Does the 401(k) match? how much?"
    first = Intent(0, "Does the 401(k) match?")
    checked = check_answer_types(question, [first, topicless], Coverage(False), evidence)
    assert [i for i, _ in checked.missing] == [topicless]  # the topic came from the question
    passwords = Intent(0, "How many times can I mistype my password?")
    lockout = ["Enforce a limit of five (5) consecutive invalid logon attempts."]
    assert check_answer_types("q", [passwords], Coverage(False), lockout).coverage.abstain
    similar = check_answer_types(
        "q", [passwords], Coverage(False), lockout, score=lambda q, ss: [0.6] * len(ss)
    )
    assert similar.coverage == Coverage(False)


def test_a_follow_up_about_it_fails_with_the_part_it_refers_to() -> None:
    days = Intent(0, "A storm flooded our house. How many days of paid emergency leave can I take")
    full_pay = Intent(1, "A storm flooded our house. is it full pay?")
    civic = ["Leave for Legal Civic Obligations is paid at the usual rate of pay."]
    checked = check_answer_types("q", [days, full_pay], Coverage(False), civic, pool=civic)
    assert [i for i, _ in checked.missing] == [days, full_pay] and checked.coverage.abstain
    assert checked.missing[1][1] == "it refers back to the part before it, which no passage answers"
    # a follow-up that names its own subject stands alone
    last = Intent(1, "how long do these internships usually last?")
    assert [i for i, _ in check_answer_types("q", [days, last], Coverage(False), civic).missing] == [days]
    # and one about "it" stands when the part before it is answered
    paid = ["Emergency leave: up to 5 days of paid leave a year."]
    assert check_answer_types("q", [days, full_pay], Coverage(False), paid).missing == ()


def test_full_abstention_text() -> None:
    text = abstention_text(
        "What is the dress code?",
        [Intent(0, "What is the dress code?")],
        [Intent(0, "What is the dress code?")],
    )
    assert text.startswith("I can't answer this from the policies you have access to:")
    assert '"What is the dress code?"' in text


def test_full_abstention_text_lists_every_intent() -> None:
    text = abstention_text("q", TWO, TWO)
    assert text.startswith("I can't answer this from the policies you have access to:")
    assert '"What is the refund window"' in text and '"can I refund a gift card?"' in text


def test_partial_abstention_text() -> None:
    text = abstention_text("q", [TWO[1]], TWO)
    assert text == 'I could not find anything about: "can I refund a gift card?".'


def test_nothing_uncovered_means_no_text() -> None:
    assert abstention_text("q", [], TWO) == ""


def test_a_quantity_question_needs_that_quantity_about_its_topic() -> None:
    from rag.stages.answer_type import missing_answer_type

    leave = ["Employees receive 25 days of paid annual leave.", "Weddings are celebrated with a team card."]
    assert missing_answer_type("How many days of paid leave do I get?", leave) is None
    assert (
        missing_answer_type("How many days of leave do I get for my wedding?", leave) is None
    )  # "leave" shared
    why = missing_answer_type("How many years must we keep audit logs?", leave)
    assert why is not None and "years" in why
    assert missing_answer_type("Who approves my leave?", leave) is None  # asks no quantity
    # an intent without a topic of its own takes it from the whole question
    assert missing_answer_type(
        "how much?", ["The 401(k) plan is run by SocialK."], context="Does the 401(k) match? how much?"
    )
    assert (
        missing_answer_type(
            "how much?", ["The 401(k) match is 4% up to $5,000."], context="Does the 401(k) match? how much?"
        )
        is None
    )


def test_contractions_are_not_the_topics_most_specific_words() -> None:
    from rag.stages.answer_type import missing_answer_type

    pool = [
        "The daily meal allowance is $50 when travelling.",
        "Hotels are booked through the portal.",
        "Meals at the office are free.",
    ]
    # "I'm" and "what's" occur in no passage: read whole ("im", "what"), they were the two rarest topic words
    question = "I'm travelling. What's the daily meal allowance?"
    assert missing_answer_type(question, pool[:1], pool=pool) is None
    why = missing_answer_type("I'm travelling. What's the daily parking allowance?", pool[1:], pool=pool)
    assert why is not None and "an amount of money" in why


def test_how_much_asks_for_money_only_when_no_other_noun_is_counted() -> None:
    from rag.stages.answer_type import missing_answer_type

    notice = ["Give your manager at least two weeks' notice before time off."]
    assert missing_answer_type("How much heads-up does my manager need?", notice) is None
    assert missing_answer_type("How much paid parental leave do I get?", notice) is None
    passages = ["Books are claimed in the expense tool; life insurance is offered."]
    for money in ("How much can I claim for a book?", "How much life insurance do I get?"):
        why = missing_answer_type(money, passages)
        assert why is not None and "an amount of money" in why, money
    why = missing_answer_type("how much is it?", passages, context="Is there a book stipend? how much is it?")
    assert why is not None and "an amount of money" in why


def test_the_counted_noun_may_carry_modifiers_and_percent_and_cents_are_quantities() -> None:
    from rag.stages.answer_type import missing_answer_type

    passwords = ["Passwords must be at least 14 characters long and never reused."]
    lockout = ["The account locks after 5 failed login attempts."]
    question = "How many wrong password attempts before my account gets locked?"
    assert missing_answer_type(question, passwords) is not None  # "14 characters" counts no attempts
    assert missing_answer_type(question, lockout) is None
    mileage = ["Mileage is reimbursed at the IRS standard rate for business trips."]
    assert missing_answer_type("How many cents per mile will I get back for mileage?", mileage) is not None
    assert missing_answer_type("How many cents per mile for mileage?", ["Mileage: $0.70 per mile."]) is None
    raise_ = ["The Annual Compensation Review considers performance and market data."]
    assert missing_answer_type("What percentage raise comes with the compensation review?", raise_)
    assert (
        missing_answer_type(
            "What percentage raise comes with the compensation review?",
            ["The compensation review budget is a 3% raise on average."],
        )
        is None
    )


def test_the_stated_quantity_must_come_from_a_passage_with_one_of_the_topics_most_specific_words() -> None:
    from rag.stages.answer_type import missing_answer_type

    sick = ["Eligible team members receive 100% of their weekly pay for up to 5 weeks of sick leave."]
    pool = [*sick, "Pay is reviewed every year.", "Weekly pay runs on Fridays.", "Sick leave needs a note."]
    question = "If I get laid off, how many weeks of severance pay would I get?"
    # "pay" is shared, but neither of the rarest topic words ("laid", "severance") is in the passage
    assert missing_answer_type(question, sick) is None  # without a pool every topic word counts
    assert missing_answer_type(question, sick, pool=pool) is not None
    severance = ["Severance: laid-off team members receive 4 weeks of pay per year of service."]
    assert missing_answer_type(question, severance, pool=[*pool, *severance]) is None
    # one of the two most specific words is enough: "work remotely" answers "work from home"
    remote = ["Employees may work remotely for up to 3 days per week."]
    home_pool = [*remote, "Home office equipment is reimbursed.", "Our office is open daily."]
    assert missing_answer_type("How many days a week can I work from home?", remote, pool=home_pool) is None


def test_what_is_the_amount_asks_for_money() -> None:
    from rag.stages.answer_type import missing_answer_type

    premiums = ["The company pays 100% of the premiums for the medical plan."]
    question = "What's the annual deductible on the medical plan?"
    assert missing_answer_type(question, premiums) is not None  # a percentage of premiums is no deductible
    assert missing_answer_type(question, ["The medical plan's annual deductible is $1,500."]) is None
    meals = ["Meals on conference trips are expensed under the travel policy."]
    assert missing_answer_type("What is the daily meal allowance at conferences?", meals) is not None
    assert missing_answer_type("What is the approval process for conferences?", meals) is None  # no amount
    # the noun must head its phrase: "the salary bands" asks for bands (a table), not for an amount
    bands = ["The bands below list every job level with its minimum and maximum."]
    assert missing_answer_type("What are the salary bands?", bands) is None
    assert missing_answer_type("What's the monthly amount GitLab pays for co-working?", meals) is not None
    # amounts in any currency the passage names
    assert (
        missing_answer_type("What is the mileage allowance?", ["The mileage allowance is 0.30 EUR per km."])
        is None
    )


def test_which_dates_asks_for_a_day_of_a_month() -> None:
    from rag.stages.answer_type import missing_answer_type

    question = "Which dates are this year's Family and Friends Days?"
    about = ["Family and Friends Day is our company-wide day off."]
    assert missing_answer_type(question, about) == "no passage states a date for what the question asks about"
    for stated in ("May 15th", "15 May", "the 3rd of July", "2026-05-15", "05/15/2026"):
        passage = f"This year's Family and Friends Day falls on {stated}."
        assert missing_answer_type(question, [passage]) is None, stated
    assert missing_answer_type("What date does open enrolment close?", about) is not None


def test_how_many_of_any_counted_noun_needs_a_number_of_that_noun() -> None:
    from rag.stages.answer_type import missing_answer_type

    question = "I want to see a therapist. How many free counseling sessions do I get through Modern Health?"
    general = ["Access counseling services through Modern Health, our Employee Assistance Program."]
    assert missing_answer_type(question, general) == (
        "no passage states a number of sessions for what the question asks about"
    )
    stated = ["Modern Health offers up to eight (8) free counseling sessions a year."]
    assert missing_answer_type(question, stated) is None
    assert (
        missing_answer_type("How many laps did Prowell run in the final?", ["Prowell ran 25 laps."]) is None
    )
    assert missing_answer_type("How many classes can I take?", ["You can take one class a year."]) is None
    # the counted noun must end its phrase before the verb: "how many stores in the US" is not checked
    assert missing_answer_type("It has how many stores in the United States?", general) is None


def test_a_choice_between_quantities_needs_one_of_them_stated() -> None:
    from rag.stages.answer_type import missing_choice

    rto = ["Recovery Time Objective (RTO): the maximum time a system can remain unavailable."]
    question = "What's the maximum recovery time objective for a Moderate system, 24 hours or 72 hours?"
    assert missing_choice(question, rto) == "no passage states 24 hours or 72 hours"
    assert missing_choice(question, [*rto, "Moderate systems have an RTO of 72 hours."]) is None
    assert missing_choice(question, ["Report incidents within 72 minutes."]) is not None  # a unit of its own
    # a bare number takes the other side's unit; "$1,000" is one amount
    assert missing_choice("Is the limit $500 or $1,000?", ["Claims up to $1,000 need no receipt."]) is None
    assert missing_choice("Is the limit $500 or $1,000?", ["Claims up to 1,000 miles."]) is not None
    salary = "Is it one or two times my salary?"
    assert missing_choice(salary, ["Life insurance pays two times your annual salary."]) is None
    assert missing_choice(salary, ["Report within 1 hour."]) is not None
    # not a choice between quantities: names, or a choice the question does not offer
    assert missing_choice("Do I need manager or HR approval?", rto) is None
    assert missing_choice("Who is older, Ann Lee or Bo Chan?", rto) is None
    assert missing_choice("How many days of leave do I get?", rto) is None


def test_similar_sentences_can_answer_without_shared_words() -> None:
    from rag.stages.answer_type import missing_answer_type

    passages = ["Enforce a limit of five (5) consecutive invalid logon attempts."]
    question = "How many times can I mistype my password?"
    assert missing_answer_type(question, passages) is not None
    assert missing_answer_type(question, passages, score=lambda q, ss: [0.6] * len(ss)) is None
    assert missing_answer_type(question, passages, score=lambda q, ss: [0.2] * len(ss)) is not None


def test_how_many_years_needs_a_count_of_years_not_a_frequency() -> None:
    from rag.stages.answer_type import missing_answer_type

    question = "Exactly how many years do we have to keep our system audit logs?"
    annually = ["Review and update the event types selected for logging annually."]
    assert missing_answer_type(question, annually) is not None  # "annually" says how often, not how long
    assert missing_answer_type(question, ["Retain audit logs for three (3) years."]) is None
    assert missing_answer_type(question, ["Audit log retention: a 5-year minimum applies."]) is None
    days = ["Customers may return items within forty-five (45) calendar days."]
    assert missing_answer_type("How many days do customers have to return an item?", days) is None
    assert missing_answer_type(
        "How many days do customers have to return an item?", ["Refunds are paid daily."]
    )


def test_a_question_whether_something_exists_needs_evidence_that_mentions_it() -> None:
    from rag.stages.answer_type import missing_focus

    laid_off = [
        "There are two types of involuntary termination, often referred to as being fired and laid off.",
        "Being laid off is a result of a strategic decision and affects multiple employees.",
    ]
    question = "If I get laid off, is there any severance pay?"
    why = missing_focus(question, laid_off, pool=laid_off)
    assert why is not None and "severance pay" in why
    assert missing_focus(question, [*laid_off, "Severance is paid at two weeks per year of service."]) is None
    # a paraphrase counts when the sentence scorer rates it close to the thing asked about
    assert missing_focus(question, laid_off, pool=laid_off, score=lambda q, ss: [0.7] * len(ss)) is None
    assert missing_focus(question, laid_off, pool=laid_off, score=lambda q, ss: [0.2] * len(ss)) is not None


def test_the_existence_check_applies_only_to_clauses_asking_whether_something_exists() -> None:
    from rag.stages.answer_type import missing_focus

    leave = ["Employees receive 25 days of paid annual leave."]
    assert missing_focus("Who approves my leave?", leave) is None
    assert missing_focus("How many days of leave do I get?", leave) is None
    assert missing_focus("Does the company offer a bike allowance?", leave) is not None
    assert missing_focus("Do I get paid annual leave?", leave) is None  # "annual" is mentioned


def test_the_existence_check_reads_the_question_after_the_scenario_told_before_it() -> None:
    from rag.stages.answer_type import missing_focus

    leave = ["Employees receive 25 days of paid annual leave."]
    why = missing_focus("I work from home full time. Is there a stipend for my internet bill?", leave)
    assert why == 'no passage mentions "stipend for my internet bill"'
    assert missing_focus("My leave ends soon! Does the company offer a bike allowance?", leave) is not None
    # "a way to ..." asks whether something can be done: a paraphrase ("a hotline") answers it
    hotline = ["Team members can call the hotline and stay anonymous."]
    assert missing_focus("Is there a way to report a coworker without giving my name?", hotline) is None
    assert missing_focus("Is there a process for reporting a coworker anonymously?", hotline) is None
    assert missing_focus("Is there an option for paid sabbaticals?", hotline) is not None  # a thing, named
    # "anything" is not a thing whose existence the evidence must name
    assert missing_focus("My anniversary is coming up. Do I get anything?", leave) is None


def test_a_question_about_what_holds_there_needs_evidence_naming_the_place() -> None:
    from rag.stages.answer_type import missing_place

    per_diem = ["Meals are reimbursed at the GSA per diem rate when an overnight stay is required."]
    question = "I'm going onsite in Washington DC for three nights. What per diem can I claim there?"
    assert missing_place(question, per_diem) == 'no passage names "Washington DC"'
    assert missing_place(question, [*per_diem, "In Washington DC the meal rate is $79."]) is None
    # the place may be named by a passage's title or section path (the caller passes them with the text)
    assert missing_place(question, ["Travel > Washington DC\nThe meal rate is $79."]) is None
    # a rule stated for every place answers for the named one
    assert missing_place(question, ["The same per diem applies in any country."]) is None
    # the organisation's own name, in most of the request's candidates, is not a place to check
    ours = ["CivicActions staff are reimbursed at the GSA rate.", "CivicActions pays travel.", "Other text."]
    assert missing_place("I work at CivicActions. What can I claim there?", per_diem, pool=ours) is None


def test_the_place_check_applies_only_to_a_there_that_points_back_at_a_named_place() -> None:
    from rag.stages.answer_type import missing_place

    rules = ["Ask at least 4 weeks before the first day of working abroad."]
    # a place told only as the scenario is not what is asked about
    assert (
        missing_place("I want to work from Portugal for two weeks. How far in advance must I ask?", rules)
        is None
    )
    # a place the asking sentence names itself is often the asked attribute ("from England": "born in London")
    assert missing_place("Which writer was born in England and died there, Roth or Childers?", rules) is None
    # "is there" / "there is" does not point at a place
    assert missing_place("I'm moving to Spain. Is there a relocation bonus?", rules) is None
    assert (
        missing_place("I'm moving to Spain. Can I keep working there?", rules) == 'no passage names "Spain"'
    )
    # months and days are not places, and "there" needs a place named before it
    assert missing_place("I start in March. Will I be paid there?", rules) is None
    # an intent without the scenario takes the place from the whole question
    question = "How long is probation in Germany, and what's the notice period there?"
    assert (
        missing_place("what's the notice period there?", rules, context=question)
        == 'no passage names "Germany"'
    )


def test_answer_types_include_the_place_check_against_the_labelled_passages() -> None:
    there = Intent(0, "I'm employed in Germany. Is the fund taxable for me there?")
    taxes = ["In some countries the fund may be taxable income."]
    checked = check_answer_types("q", [there], Coverage(False), taxes)
    assert checked.coverage == Coverage(True, (there,), 'no passage names "Germany"')
    labelled = ["Germany > Taxes\nIn some countries the fund may be taxable income."]
    assert check_answer_types("q", [there], Coverage(False), taxes, labelled=labelled).missing == ()


def test_a_count_asked_for_one_occasion_needs_the_occasion_mentioned() -> None:
    from rag.stages.answer_type import missing_focus

    leave = ["Full-time employees receive 25 days of paid annual leave per calendar year."]
    why = missing_focus("How many days of paid leave do I get for my wedding?", leave, pool=leave)
    assert why is not None and "wedding" in why
    assert (
        missing_focus(
            "How many days of paid leave do I get for my wedding?",
            [*leave, "Employees get three days of leave for their wedding."],
        )
        is None
    )
    # the occasion named by the policy itself ("for a full refund") is what the evidence states
    refunds = ["Customers may return items within 45 days of delivery for a full refund."]
    assert (
        missing_focus("How many days does a customer have to return an item for a full refund?", refunds)
        is None
    )
    # "for the server room": a thing, not an occasion of the asker's; not checked
    assert missing_focus("How often are the logs reviewed for the server room?", leave) is None


def test_the_most_specific_word_of_the_thing_is_chosen_from_the_requests_own_candidates() -> None:
    from rag.stages.answer_type import missing_focus

    pool = ["Travel is paid by the company.", "Pay is reviewed each July.", "Meal allowances are paid daily."]
    evidence = ["Pay is reviewed each July."]
    # "severance" appears in no candidate, "pay" in several: the evidence must mention severance
    assert missing_focus("Is there any severance pay?", evidence, pool=pool) is not None
    assert missing_focus("Is there any review of pay?", evidence, pool=pool) is None


def test_what_x_do_we_get_presupposes_x() -> None:
    from rag.stages.answer_type import missing_focus

    equipment = ["This policy covers the laptops, phones and monitors that the company provides for work."]
    why = missing_focus("What discount do employees get on company products?", equipment, pool=equipment)
    assert why is not None and "discount" in why
    assert missing_focus("What laptops do employees get?", equipment, pool=equipment) is None
    assert missing_focus("What do employees get?", equipment, pool=equipment) is None  # names nothing


def _evidence(*scores: float) -> list[Evidence]:
    return [
        Evidence(n, make_candidate(f"passage {n}", ordinal=n, rerank=score), 0)
        for n, score in enumerate(scores, start=1)
    ]


def test_the_answer_check_reads_the_passages_the_scores_vouch_for() -> None:
    # edge-packed evidence: the budget filled it with passages under the threshold (0.1) to use its tokens
    evidence = _evidence(0.9, 0.05, 0.02, 0.3, 0.5)
    assert [e.n for e in vouched_evidence(evidence, threshold=0.1, k=2)] == [1, 5]  # best first, capped
    assert [e.n for e in vouched_evidence(evidence, threshold=0.1, k=6)] == [1, 5, 4]
    assert vouched_evidence(evidence, threshold=0.1, k=None) == evidence  # None: every passage, in order


def test_the_answer_check_reads_the_best_passage_when_none_clears_the_threshold() -> None:
    assert [e.n for e in vouched_evidence(_evidence(0.01, 0.03), threshold=0.1, k=6)] == [2]
    assert vouched_evidence([], threshold=0.1, k=6) == []


@pytest.mark.parametrize(
    ("question", "reason"),
    [
        (
            "What is the daily meal allowance?",
            "no passage states an amount of money for what the question asks about",
        ),
        (
            "What percentage of my salary is matched?",
            "no passage states a percentage for what the question asks about",
        ),
        (
            "How many days of leave do I get?",
            "no passage states a number of days for what the question asks about",
        ),
    ],
)
def test_a_missing_answer_type_reads_as_plain_english(question: str, reason: str) -> None:
    from rag.stages.answer_type import missing_answer_type

    unrelated = ["Meals, salary and leave are described in the handbook."]
    assert missing_answer_type(question, unrelated) == reason
