from __future__ import annotations

from dataclasses import replace
from datetime import date

from rag.stages.bundle import MAX_BUNDLE, MAX_CHAIN_BUNDLE, bundle_dependencies
from rag.stages.pack import edge_pack, number_evidence
from rag.types import Bundle, Candidate, Chunk
from tests.stages.factories import (
    InMemoryLookup,
    make_candidate,
    make_chunk,
    make_doc,
    ranked,
    user_filter,
    with_groups,
)

REFUNDS = make_doc(
    "refunds",
    "Refund Policy",
    [
        ("Refund Policy > 1. Scope", "This policy applies to all purchases made in our stores and online."),
        ("Refund Policy > 3. Refund window", "Customers may request a refund within 45 days of purchase."),
        ("Refund Policy > 3. Refund window", "Refunds are paid to the original payment method."),
        ("Refund Policy > 4. Refund exceptions", "Some purchases follow different rules, listed below."),
        (
            "Refund Policy > 4. Refund exceptions > 4.1 Sale items",
            "Sale items are not eligible for a refund after 14 days.",
        ),
        ("Refund Policy > 4. Refund exceptions > 4.2 Gift cards", "Gift cards are not eligible for refunds."),
        ("Refund Policy > 4. Refund exceptions > 4.21 Vouchers", "Vouchers expire after one year."),
    ],
)
TRAVEL = with_groups(
    make_doc(
        "travel",
        "Travel Policy",
        [
            ("Travel Policy > 5. Reimbursement", "Travel costs are reimbursed monthly."),
            (
                "Travel Policy > 5. Reimbursement > 5.1 Local travel",
                "Local travel is reimbursed at 0.30 EUR per km.",
            ),
        ],
    ),
    "finance",
)
HR = make_doc(
    "hr",
    "Employee Handbook",
    [
        (
            "Employee Handbook > 2. Benefits",
            "Mileage is paid as described in section 5.1 of the Travel Policy.",
        ),
        ("Employee Handbook > 3. Expenses", "Expense claims follow the process set out in 3.4 below."),
        (
            "Employee Handbook > 3. Expenses > 3.4 Claims",
            "Claims are filed in the expense tool within 30 days.",
        ),
    ],
)
LEAVE = make_doc(
    "leave",
    "Leave Policy",
    [
        ("Leave Policy > 2. Annual leave", "Employees are entitled to 25 days of annual leave per year."),
        ("Leave Policy > 2. Annual leave", "Leave requests go to your manager two weeks ahead."),
        (
            "Leave Policy > 2. Annual leave > 2.3 Annual leave carry-over",
            "Unused days cannot be carried over, except with HR approval.",
        ),
        ("Leave Policy > 5. Sick leave", "Sick leave rules do not apply to contractors."),
    ],
)
LISTS = make_doc(
    "expenses",
    "Expense Policy",
    [
        ("Expense Policy > 1. Receipts", "Receipts are required for these expenses:"),
        ("Expense Policy > 1. Receipts", "- hotels\n- flights\n- meals over 20 EUR"),
        ("Expense Policy > 2. Approvals", "Approvals need a cost centre.\n- team lead up to 500 EUR"),
        ("Expense Policy > 2. Approvals", "- director above 500 EUR\n- CFO above 10000 EUR"),
        ("Expense Policy > 3. Deadlines", "Claims must be filed within 30 days."),
        ("Expense Policy > 3. Deadlines", "However, claims for travel abroad may take 60 days."),
        ("Expense Policy > 4. Scope", "This policy covers all employees and contractors."),
    ],
)
LOOKUP = InMemoryLookup([*REFUNDS, *TRAVEL, *HR, *LEAVE, *LISTS])
STAFF = user_filter("staff")
FINANCE = user_filter("staff", "finance")


def member_ids(bundle: Bundle) -> list[str]:
    return list(bundle.chunk_ids)


def test_a_self_contained_passage_stays_single() -> None:
    selected = ranked([REFUNDS[2]])
    bundles, added, dropped = bundle_dependencies(selected, LOOKUP, STAFF)
    assert [(b.bundle_id, member_ids(b), b.reason) for b in bundles] == [(0, ["refunds:2"], "single")]
    assert added == [] and dropped == []
    assert bundles[0].score == selected[0].rerank_score


def test_this_policy_is_not_an_unresolved_reference() -> None:
    bundles, added, _ = bundle_dependencies(ranked([LISTS[6]]), LOOKUP, STAFF)
    assert added == [] and bundles[0].reason == "single"


def test_a_cross_reference_in_the_same_document_is_bundled_in_document_order() -> None:
    rule = replace(
        REFUNDS[1], text="Customers may request a refund within 45 days, except as set out in section 4.2."
    )
    lookup = InMemoryLookup([rule, *REFUNDS[2:]])
    bundles, added, dropped = bundle_dependencies(ranked([rule]), lookup, STAFF)
    assert [c.chunk_id for c in added] == ["refunds:5"]
    assert added[0].added_by == "cross_reference:refunds:1"
    assert added[0].rerank_score is None
    assert member_ids(bundles[0]) == ["refunds:1", "refunds:5"]
    assert bundles[0].reason == "cross_reference"
    assert dropped == []


def test_section_numbers_match_whole_components_only() -> None:
    # "4.2" must not resolve to "4.21 Vouchers", "4" resolves to the start of section 4
    rule = replace(REFUNDS[1], text="Refunds within 45 days; see section 4.")
    lookup = InMemoryLookup([rule, *REFUNDS[2:]])
    _, added, _ = bundle_dependencies(ranked([rule]), lookup, STAFF)
    assert [c.chunk_id for c in added] == ["refunds:3"]


def test_a_passage_follows_at_most_two_cross_references() -> None:
    toc = replace(REFUNDS[0], text="Contents: see section 3, section 4.1, section 4.2 and section 4.21.")
    _, added, _ = bundle_dependencies(ranked([toc]), InMemoryLookup([toc, *REFUNDS[1:]]), STAFF)
    assert [c.chunk_id for c in added] == ["refunds:1", "refunds:4"]


def test_a_bare_dotted_reference_resolves_in_the_same_document() -> None:
    bundles, added, _ = bundle_dependencies(ranked([HR[1]]), LOOKUP, STAFF)
    assert [c.chunk_id for c in added] == ["hr:2"]
    assert bundles[0].reason == "cross_reference"


def test_a_cross_reference_to_another_document_resolves_its_title() -> None:
    bundles, added, dropped = bundle_dependencies(ranked([HR[0]]), LOOKUP, FINANCE)
    assert [c.chunk_id for c in added] == ["travel:1"]
    assert member_ids(bundles[0]) == ["hr:0", "travel:1"]  # the referencing passage first
    assert dropped == []


def test_an_ambiguous_title_that_matches_the_own_document_stays_there() -> None:
    rule = replace(REFUNDS[1], text="Refunds within 45 days, except as set out in section 4.2 of the Policy.")
    archive = replace(REFUNDS[5], chunk_id="old:5", doc_id="old", title="Old Refund Policy")
    lookup = InMemoryLookup([archive, rule, *REFUNDS[2:]])
    _, added, _ = bundle_dependencies(ranked([rule]), lookup, STAFF)
    assert [c.chunk_id for c in added] == ["refunds:5"]


def test_an_unknown_document_title_resolves_to_nothing() -> None:
    rule = replace(HR[0], text="Mileage is paid as described in section 5.1 of the Moon Base Manual.")
    _, added, dropped = bundle_dependencies(ranked([rule]), InMemoryLookup([rule, *TRAVEL]), FINANCE)
    assert added == [] and dropped == []


def test_a_referenced_chunk_the_user_may_not_read_is_refused_without_a_trace_of_its_content() -> None:
    bundles, added, dropped = bundle_dependencies(ranked([HR[0]]), LOOKUP, STAFF)
    assert added == []
    assert member_ids(bundles[0]) == ["hr:0"] and bundles[0].reason == "single"
    assert [(d.chunk_id, d.reason, d.stage) for d in dropped] == [("travel:1", "access_denied", "bundling")]


def test_an_expired_neighbour_is_refused() -> None:
    head, items = LISTS[0], replace(LISTS[1], expires=date(2020, 1, 1))
    lookup = InMemoryLookup([head, items])
    _, added, dropped = bundle_dependencies(ranked([head]), lookup, STAFF)
    assert added == [] and [d.reason for d in dropped] == ["access_denied"]


def test_a_rule_travels_with_the_exception_from_the_reranked_pool() -> None:
    pool = ranked([REFUNDS[1], REFUNDS[5], REFUNDS[2]])
    bundles, added, _ = bundle_dependencies(pool[:1], LOOKUP, STAFF, pool=pool)
    assert [c.chunk_id for c in added] == ["refunds:5"]
    assert added[0].added_by == "exception_of:refunds:1"
    assert added[0].rerank_score == pool[1].rerank_score  # came from the pool, keeps its score
    assert bundles[0].reason == "rule_exception"
    assert member_ids(bundles[0]) == ["refunds:1", "refunds:5"]


def test_an_exception_from_another_document_in_the_pool_is_ignored() -> None:
    pool = ranked([REFUNDS[1], LEAVE[3]])
    _, added, _ = bundle_dependencies(pool[:1], LOOKUP, STAFF, pool=pool)
    assert added == []


def test_an_exception_about_another_topic_in_the_pool_is_ignored() -> None:
    # "sick leave" shares only the title word "leave" with an annual-leave rule
    pool = ranked([LEAVE[0], LEAVE[3]])
    lookup = InMemoryLookup([LEAVE[0], LEAVE[1], LEAVE[3]])
    _, added, _ = bundle_dependencies(pool[:1], lookup, STAFF, pool=pool)
    assert added == []


def test_a_pool_exception_sharing_a_topic_word_in_its_text_is_bundled() -> None:
    rule = make_candidate(LISTS[4], rerank=3.0)  # "Claims must be filed within 30 days."
    late = replace(LISTS[2], text="Late claims are not eligible unless a director approves them.")
    bundles, added, _ = bundle_dependencies(
        [rule], InMemoryLookup([LISTS[4], late]), STAFF, pool=[rule, make_candidate(late, rerank=1.0)]
    )
    assert [c.chunk_id for c in added] == [late.chunk_id]
    assert member_ids(bundles[0]) == [late.chunk_id, "expenses:4"]  # document order


def test_without_a_pool_the_exception_comes_from_a_section_sharing_terms() -> None:
    bundles, added, _ = bundle_dependencies(ranked([LEAVE[0]]), LOOKUP, STAFF)
    assert [c.chunk_id for c in added] == ["leave:2"]  # "annual leave carry-over", not "sick leave"
    assert bundles[0].reason == "rule_exception"


def test_a_rule_that_states_its_own_exception_is_not_expanded() -> None:
    _, added, _ = bundle_dependencies(ranked([LEAVE[2]]), LOOKUP, STAFF, pool=ranked(LEAVE))
    assert added == []


def test_an_exception_already_selected_merges_bundles_instead_of_duplicating() -> None:
    pool = ranked([REFUNDS[5], REFUNDS[2], REFUNDS[1]])  # the exception ranks best
    # (refunds:1 and refunds:2 follow each other: without join_adjacent=False they would share a bundle too)
    bundles, added, _ = bundle_dependencies(pool, LOOKUP, STAFF, pool=pool, join_adjacent=False)
    assert added == []
    assert [member_ids(b) for b in bundles] == [["refunds:1", "refunds:5"], ["refunds:2"]]
    assert [b.bundle_id for b in bundles] == [0, 1]
    assert bundles[0].reason == "rule_exception"
    assert bundles[0].score == pool[0].rerank_score


def test_a_passage_ending_with_a_colon_takes_the_list_that_follows() -> None:
    bundles, added, _ = bundle_dependencies(ranked([LISTS[0]]), LOOKUP, STAFF)
    assert [(c.chunk_id, c.added_by) for c in added] == [("expenses:1", "neighbour_of:expenses:0")]
    assert bundles[0].reason == "continuation"


def test_a_list_that_continues_in_the_next_chunk_is_completed() -> None:
    _, added, _ = bundle_dependencies(ranked([LISTS[2]]), LOOKUP, STAFF)
    assert [c.chunk_id for c in added] == ["expenses:3"]


def test_a_list_fragment_gets_its_lead_in() -> None:
    bundles, added, _ = bundle_dependencies(ranked([LISTS[1]]), LOOKUP, STAFF)
    assert [c.chunk_id for c in added] == ["expenses:0"]
    assert member_ids(bundles[0]) == ["expenses:0", "expenses:1"]


def test_a_passage_opening_with_however_gets_its_previous_neighbour() -> None:
    bundles, added, _ = bundle_dependencies(ranked([LISTS[5]]), LOOKUP, STAFF)
    assert [c.chunk_id for c in added] == ["expenses:4"]
    assert bundles[0].reason == "reference"
    assert member_ids(bundles[0]) == ["expenses:4", "expenses:5"]


def test_no_expansion_by_default() -> None:
    _, added, dropped = bundle_dependencies(ranked([LISTS[4], REFUNDS[2]]), LOOKUP, STAFF)
    assert added == [] and dropped == []


def test_two_passages_needing_the_same_chunk_share_one_bundle() -> None:
    a = replace(HR[1], chunk_id="hr:1a", text="Claims: see 3.4.")
    b = replace(HR[1], chunk_id="hr:1b", ordinal=1, text="Late claims are handled as described in 3.4.")
    lookup = InMemoryLookup([a, b, HR[2]])
    bundles, added, _ = bundle_dependencies(ranked([a, b]), lookup, STAFF)
    assert [c.chunk_id for c in added] == ["hr:2"]
    assert len(bundles) == 1 and set(member_ids(bundles[0])) == {"hr:1a", "hr:1b", "hr:2"}


def test_max_added_caps_expansion() -> None:
    selected = ranked([LISTS[0], LISTS[5]])
    bundles, added, dropped = bundle_dependencies(selected, LOOKUP, STAFF, max_added=1)
    assert [c.chunk_id for c in added] == ["expenses:1"]
    assert [(d.chunk_id, d.reason) for d in dropped] == [("expenses:4", "bundle_limit")]
    assert len(bundles) == 2


def test_token_budget_caps_expansion() -> None:
    selected = ranked([LISTS[0]])
    budget = LISTS[0].n_tokens + LISTS[1].n_tokens - 1
    _, added, dropped = bundle_dependencies(selected, LOOKUP, STAFF, token_budget=budget)
    assert added == [] and [d.reason for d in dropped] == ["over_budget_tokens"]


def test_bundle_ids_follow_the_best_members_rank_and_scores_fall_back_to_fused() -> None:
    unranked = [
        Candidate(chunk=c, fused_score=0.1 * (3 - i)) for i, c in enumerate([REFUNDS[2], LISTS[4], LEAVE[1]])
    ]
    bundles, _, _ = bundle_dependencies(unranked, LOOKUP, STAFF)
    assert [b.bundle_id for b in bundles] == [0, 1, 2]
    assert [member_ids(b)[0] for b in bundles] == ["refunds:2", "expenses:4", "leave:1"]
    assert [b.score for b in bundles] == [c.fused_score for c in unranked]


def test_added_members_without_rerank_score_do_not_lift_a_bundle_score() -> None:
    selected = [make_candidate(LISTS[0], rerank=-2.0)]
    bundles, _, _ = bundle_dependencies(selected, LOOKUP, STAFF)
    assert bundles[0].score == -2.0


def test_a_selected_duplicate_is_bundled_once() -> None:
    selected = ranked([REFUNDS[2], REFUNDS[2]])
    bundles, _, _ = bundle_dependencies(selected, LOOKUP, STAFF)
    assert [member_ids(b) for b in bundles] == [["refunds:2"]]


def test_bundle_members_stay_adjacent_and_in_document_order_but_for_the_edge_after_packing() -> None:
    pool = ranked([REFUNDS[5], LISTS[4], REFUNDS[1], LISTS[0], LEAVE[1]])
    bundles, _, _ = bundle_dependencies(pool, LOOKUP, STAFF, pool=pool)
    evidence = number_evidence(edge_pack(bundles))
    for bundle in bundles:
        positions = [e.n for e in evidence if e.bundle_id == bundle.bundle_id]
        assert positions == list(range(positions[0], positions[0] + len(positions)))
        chunks: list[Chunk] = [e.candidate.chunk for e in evidence if e.bundle_id == bundle.bundle_id]
        # document order, but for the best passage of an edge bundle, which sits at the edge
        members = [m.chunk for m in bundle.members]
        best = max(bundle.members, key=lambda m: m.rerank_score or 0.0).chunk
        if positions[0] == 1:
            assert chunks[0] == best
        if positions[0] == 1 or positions[-1] == len(evidence):
            assert [c for c in chunks if c != best] == [c for c in members if c != best]
        else:
            assert chunks == members
    assert sorted(e.n for e in evidence) == list(range(1, len(evidence) + 1))


def test_a_rule_mentioning_one_exception_still_gets_the_exceptions_section() -> None:
    doc = make_doc(
        "returns",
        "Returns Policy",
        [
            (
                "Returns Policy > 3. Standard returns",
                "Customers may return items within 45 days. After 90 days we do not accept returns, except for "
                "faulty goods under section 5.",
            ),
            (
                "Returns Policy > 4. Refund exceptions > 4.2 Gift cards",
                "Gift cards are not refundable, except where required by law.",
            ),
            ("Returns Policy > 5. Faulty goods", "A faulty item can be returned within its warranty period."),
        ],
    )
    pool = ranked([doc[1], doc[0]])  # the exception ranks best, the rule second
    bundles, _, _ = bundle_dependencies(pool, InMemoryLookup(doc), STAFF, pool=pool)
    first = member_ids(bundles[0])
    assert first[:2] == ["returns:0", "returns:1"], first  # rule and exception adjacent, in document order
    assert bundles[0].reason == "rule_exception"


def test_a_selected_passage_continuing_a_full_bundle_joins_it_as_one_block() -> None:
    # A list split over four chunks of one section, all selected: the middle ones form a full bundle first
    # (the best passage with both list neighbours); the list's first piece still reads with them, not apart.
    doc = make_doc(
        "scans",
        "Risk Assessment Procedure",
        [
            (
                "Risk Assessment Procedure > RA-5 Vulnerability Scanning",
                "RA-5 Vulnerability Scanning\n1) Scan for vulnerabilities:\na) networked devices every 72 hours;\n"
                "b) databases monthly.",
            ),
            (
                "Risk Assessment Procedure > RA-5 Vulnerability Scanning",
                "2) Analyze scan reports.\n3) Remediate critical findings within 15 days;",
            ),
            (
                "Risk Assessment Procedure > RA-5 Vulnerability Scanning",
                "4) Open a plan of action when a timeline is missed.\n5) Share scan results with the owners;",
            ),
            (
                "Risk Assessment Procedure > RA-5 Vulnerability Scanning",
                "6) Update the scanned vulnerabilities daily.",
            ),
            ("Risk Assessment Procedure > RA-6 Monitoring", "Monitoring is continuous."),
        ],
    )
    pool = ranked([doc[2], doc[0], doc[1], doc[3], doc[4]])
    bundles, added, _ = bundle_dependencies(pool, InMemoryLookup(doc), STAFF, pool=pool)
    assert added == []
    assert member_ids(bundles[0]) == ["scans:0", "scans:1", "scans:2", "scans:3"]  # one block, document order
    assert member_ids(bundles[1]) == ["scans:4"]


def test_links_between_selected_passages_never_grow_a_bundle_past_the_cap() -> None:
    doc = make_doc(
        "big",
        "Refund Policy",
        [
            (f"Refund Policy > {i}. Part {i}", f"Refunds must follow rule {i}; see section {i + 1}.")
            for i in range(1, 9)
        ],
    )
    pool = ranked(doc)
    bundles, _, _ = bundle_dependencies(pool, InMemoryLookup(doc), STAFF, pool=pool)
    assert all(len(b.members) <= MAX_BUNDLE for b in bundles)
    assert sorted(c for b in bundles for c in member_ids(b)) == sorted(c.chunk_id for c in doc)


# -- an exception passage travels with the rule it qualifies -------------------------------------------------
PASSWORDS = make_doc(
    "security",
    "Security Policy",
    [
        ("Security Policy > Password Policy", "Passwords protect our systems and services."),
        (
            "Security Policy > Password Policy > Password Managers",
            "We require unique, strong passwords for every service. Use the company password manager.",
        ),
        (
            "Security Policy > Password Policy > Some Password Exceptions",
            "Starter passwords for new accounts may be sent in clear text, on condition that the recipient "
            "sets a new strong password at once.",
        ),
        ("Security Policy > Laptops", "Laptops must lock after 15 minutes and use full-disk encryption."),
    ],
)


def test_an_exception_passage_takes_the_rule_it_qualifies_from_the_pool() -> None:
    pool = ranked([PASSWORDS[2], PASSWORDS[3], PASSWORDS[1]])
    bundles, added, _ = bundle_dependencies(pool[:1], InMemoryLookup(PASSWORDS), STAFF, pool=pool)
    assert [(c.chunk_id, c.added_by) for c in added] == [("security:1", "rule_of:security:2")]
    assert bundles[0].reason == "rule_exception"
    assert member_ids(bundles[0]) == ["security:1", "security:2"]  # the rule first: document order


def test_without_the_rule_in_the_pool_the_nearest_earlier_rule_of_the_section_is_taken() -> None:
    _, added, _ = bundle_dependencies(ranked([PASSWORDS[2]]), InMemoryLookup(PASSWORDS), STAFF)
    assert [c.chunk_id for c in added] == [
        "security:1"
    ]  # not the laptop rule: no shared topic, other section


def test_an_exception_finds_no_rule_outside_its_section_or_without_a_shared_topic() -> None:
    unrelated = [PASSWORDS[0], PASSWORDS[2], PASSWORDS[3]]  # "protect our systems" states no rule
    _, added, _ = bundle_dependencies(
        ranked([PASSWORDS[2]]), InMemoryLookup(unrelated), STAFF, pool=ranked(unrelated)
    )
    assert added == []


# -- Markdown links to other documents and sections ---------------------------------------------------------
PRODEV = make_chunk(
    "Anything under $50 can be bought without permission. Over $50 needs [approval in advance](expenses.md); "
    "receipts go in [the usual way](../tools/harvest.md#tracking-expenses). See [the FAQ](https://example.com/faq).",
    doc_id="prodev",
    title="Professional Development",
    section="Professional Development > Budget",
    source="docs/policies/prodev.md",
)
EXPENSES = make_doc(
    "expenses-md",
    "Expenses",
    [
        ("Expenses > Approvals", "Ask your manager before any purchase over $50."),
        ("Expenses > Guidelines", "Several purchases under $50 in a short time count as one purchase."),
    ],
    source="docs/policies/expenses.md",
)
HARVEST = make_doc(
    "harvest",
    "Harvest",
    [
        ("Harvest > Logging time", "Log your hours every day."),
        ("Harvest > Tracking Expenses", "Enter expenses under the project they belong to."),
    ],
    source="docs/tools/harvest.md",
)
LINKED = InMemoryLookup([PRODEV, *EXPENSES, *HARVEST])


def test_a_link_to_another_document_brings_its_best_ranked_retrieved_passage() -> None:
    pool = ranked([PRODEV, EXPENSES[1], HARVEST[0], EXPENSES[0]])
    bundles, added, _ = bundle_dependencies(pool[:1], LINKED, STAFF, pool=pool)
    assert [(c.chunk_id, c.added_by) for c in added] == [("expenses-md:1", "link_from:prodev:0")]
    assert bundles[0].reason == "cross_reference"


def test_a_link_with_an_anchor_brings_that_section_only() -> None:
    pool = ranked([PRODEV, HARVEST[0], HARVEST[1]])
    _, added, _ = bundle_dependencies(pool[:1], LINKED, STAFF, pool=pool)
    assert [c.chunk_id for c in added] == [
        "harvest:1"
    ]  # "#tracking-expenses", not the better-ranked "logging"


def test_links_are_followed_only_to_passages_retrieved_for_the_question() -> None:
    # handbooks link everywhere: a link is a dependency only when its target was retrieved for this question
    _, added, _ = bundle_dependencies(ranked([PRODEV]), LINKED, STAFF, pool=ranked([PRODEV]))
    assert added == []


def test_a_linked_passage_the_user_may_not_read_is_refused() -> None:
    secret = with_groups([EXPENSES[1]], "finance")[0]
    pool = ranked([PRODEV, secret])
    bundles, added, dropped = bundle_dependencies(
        pool[:1], InMemoryLookup([PRODEV, secret]), STAFF, pool=pool
    )
    assert added == [] and member_ids(bundles[0]) == ["prodev:0"]
    assert [(d.chunk_id, d.reason) for d in dropped] == [(secret.chunk_id, "access_denied")]


def test_a_linked_passage_that_is_a_list_fragment_gets_its_lead_in() -> None:
    # the link leads to the retrieved steps 3-4 of a procedure; they are shown with the steps' lead-in
    time_off = make_doc(
        "timeoff",
        "Time Off",
        [
            (
                "Time Off > Approval",
                "Follow this procedure to request time off:\n1. Talk to your team.\n"
                "2. Email the schedule list to request the time.",
            ),
            ("Time Off > Approval", "3. A manager replies when it is approved.\n4. Log the time off."),
        ],
        source="docs/policies/time-off.md",
    )
    onboarding = make_chunk(
        "Ask for days off as described in [the time off policy](policies/time-off.md). Plan it with your team.",
        doc_id="onboarding",
        title="Onboarding",
        section="Onboarding > Day 2",
        source="docs/onboarding.md",
    )
    pool = ranked([onboarding, time_off[1]])  # the lead-in itself was not retrieved
    bundles, added, _ = bundle_dependencies(
        pool[:1], InMemoryLookup([onboarding, *time_off]), STAFF, pool=pool
    )
    assert [(c.chunk_id, c.added_by) for c in added] == [
        ("timeoff:1", "link_from:onboarding:0"),
        ("timeoff:0", "neighbour_of:timeoff:1"),
    ]
    assert member_ids(bundles[0]) == ["onboarding:0", "timeoff:0", "timeoff:1"]


def test_selected_passages_that_follow_each_other_travel_together_in_document_order() -> None:
    # travel:1 and travel:0 are neighbours; leave:1 ranks between them
    selected = ranked([TRAVEL[1], LEAVE[1], TRAVEL[0], REFUNDS[2]])
    bundles, added, _ = bundle_dependencies(selected, LOOKUP, FINANCE)
    assert added == []
    assert [(member_ids(b), b.reason) for b in bundles] == [
        (["travel:0", "travel:1"], "adjacent"),
        (["leave:1"], "single"),
        (["refunds:2"], "single"),
    ]
    evidence = number_evidence(edge_pack(bundles))
    order = [e.candidate.chunk_id for e in evidence]
    # never split across the two ends: the best (travel:1) leads, the passage before it follows
    assert order[:2] == ["travel:1", "travel:0"]
    apart, _, _ = bundle_dependencies(selected, LOOKUP, FINANCE, join_adjacent=False)
    assert [member_ids(b) for b in apart] == [["travel:1"], ["leave:1"], ["travel:0"], ["refunds:2"]]


def test_a_run_of_neighbours_stops_at_the_chain_cap() -> None:
    run = ranked([REFUNDS[i] for i in range(7)])  # a whole document, chunk after chunk
    bundles, _, _ = bundle_dependencies(run, LOOKUP, STAFF)
    assert all(len(b.members) <= MAX_CHAIN_BUNDLE for b in bundles)
    assert sorted(cid for b in bundles for cid in member_ids(b)) == [f"refunds:{i}" for i in range(7)]
    assert any(len(b.members) > 1 for b in bundles)
