"""Query processing of recall: Chinese question words and numbers (property tests), count/list
and time-word reading, and the two recall paths they drive: the count/list path (wider,
diversified by content) and the multi-hop second step (session neighbours of the best hits)."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from memory.ingest.raw import RawMessage, store_raw
from memory.recall import ranking
from memory.recall.query import time_span, wants_many
from memory.recall.search import Recaller, RecallSettings, _neighbours
from memory.store.keywords import keyword_candidates, rebuild_index
from memory.text import STOPWORDS, ZH_QUESTION_WORDS, normalize_numbers, query_terms, tokenize

NOW = datetime(2026, 3, 11, 12, 0)  # a Wednesday

PARTICLES = sorted(ZH_QUESTION_WORDS) + ["？", "，", "?", " "]
CONTENT = ["上海", "咖啡", "猫", "吗啡", "呢子大衣", "三里屯", "护照", "牙医", "生日", "钢琴", "北京饭店", "火锅", "Berlin", "piano"]
NUMERALS = st.text(alphabet="零〇一二两三四五六七八九十百千万月日号年块个次天里起些屯0123456789 ", max_size=20)


@settings(max_examples=300, deadline=None)
@given(NUMERALS)
def test_number_normalisation_is_idempotent(text):
    once = normalize_numbers(text)
    assert normalize_numbers(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_number_normalisation_is_idempotent_on_any_text(text):
    once = normalize_numbers(text)
    assert normalize_numbers(once) == once


def test_numbers_and_dates_read_the_same_in_both_scripts():
    assert normalize_numbers("九百块") == "900块" and normalize_numbers("二十三岁") == "23岁"
    assert normalize_numbers("一万五千元") == "15000元" and normalize_numbers("两个月") == "2个月"
    for word in ("三里屯", "一起", "万一", "千万别", "星期三", "一些"):  # numerals inside words stay
        assert normalize_numbers(word) == word
    assert {"april", "5"} <= set(tokenize("四月五日")) and {"april", "5"} <= set(tokenize("4月5号"))
    assert {"900"} <= set(tokenize("花了九百")) & set(tokenize("spent 900"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PARTICLES), st.sampled_from(CONTENT)), min_size=1, max_size=8),
       st.sampled_from(CONTENT))
def test_question_particles_never_remove_a_content_word(pieces, word):
    """Wrapped in any question words and particles, a content word's own terms survive."""
    query = "，".join([*pieces, word])
    kept = set(query_terms(query))
    assert set(query_terms(word)) <= kept
    assert not kept & ZH_QUESTION_WORDS


def test_question_words_leave_the_keyword_query():
    terms = query_terms("请问我一共去过几次上海呀？都是哪些时候来着")
    assert "上海" in terms
    assert not {"请问", "一共", "几次", "哪些", "呀", "来着"} & set(terms)


def test_count_and_list_queries_are_recognised():
    for q in ("How many times did I go hiking?", "Which books did Mel read?", "我一共去过几次上海？",
              "我参加过哪些活动？", "你推荐过的酒店里哪几家在东城区？", "List all the pets I have"):
        assert wants_many(q), q
    for q in ("What is my cat's name?", "我的猫叫什么名字？", "When did Caroline go to the support group?"):
        assert not wants_many(q), q


def test_time_words_point_at_spans_relative_to_the_questions_date():
    monday = datetime(2026, 3, 9)
    assert time_span("上周我买了什么？", NOW) == time_span("what did I buy last week?", NOW)
    span = time_span("上周我买了什么？", NOW)
    assert span.start == monday - timedelta(days=7) and span.end == monday
    assert datetime(2026, 3, 10) in time_span("昨天吃了什么", NOW)
    assert datetime(2025, 6, 1) in time_span("去年夏天去了哪里", NOW) and datetime(2026, 1, 2) not in time_span("去年", NOW)
    assert datetime(2026, 3, 8, 12) in time_span("3 days ago", NOW) and datetime(2026, 3, 8, 12) in time_span("三天前", NOW)
    assert datetime(2026, 1, 11) in time_span("两个月前", NOW)
    assert time_span("我的猫叫什么名字？", NOW) is None


def test_nearest_is_not_recently():
    """最近 before 的 or after 离/距 is "nearest" (最近的地铁站), not "recently": no time span, so
    no boost for the last two weeks (it moved "which metro station is nearest?" answers)."""
    for q in ("我那次坐地铁去钓鱼台国宾馆，你说那边最近的地铁站是哪个？", "离酒店最近的超市在哪？", "距离我家最近的公园"):
        assert time_span(q, NOW) is None, q
    for q in ("我最近买了什么？", "最近我去了哪些地方", "你最近推荐的餐馆", "离开北京以后我最近去了哪", "what did I do recently?"):
        assert time_span(q, NOW) is not None, q


def say(store, embedder, space, session, lines, start):
    msgs = []
    prev = None
    for i, (who, text) in enumerate(lines):
        msgs.append(RawMessage(space_id=space, role="user" if who == "用户" else "assistant", text=text, speaker=who,
                               created_at=start + timedelta(seconds=30 * i), session_id=session,
                               turn_id=f"{session}:{i}", context=prev[1] if prev else None,
                               context_speaker=prev[0] if prev else None))
        prev = (who, text)
    return store_raw(store, embedder, msgs, dedup=False)


def test_numbers_match_across_scripts_in_keyword_search(store, embedder):
    ids = say(store, embedder, "u", "s1", [("用户", "我花了900块买了一双跑鞋"), ("用户", "我买了一本书")], NOW - timedelta(days=3))
    rebuild_index(store)
    kw = store.read(lambda c: keyword_candidates(c, query_terms("我花九百块买了什么？"), ["u"], 5))
    assert kw[0][0] == ids[0]


def test_the_second_step_finds_the_turn_next_to_the_one_that_names_the_entity(store, embedder):
    """"What did I ask for when you recommended X?": the answer is the user's turn before the
    one naming X, which shares no word with the question."""
    start = NOW - timedelta(days=30)
    ids = say(store, embedder, "u", "s1", [("用户", "帮我找一家便宜点、安静的地方。"), ("助手", "推荐您去老北京炸酱面馆。")], start)
    for n, (a, b) in enumerate([("今天天气怎么样？", "今天晴，适合出门。"), ("我想去看电影。", "推荐您看新上映的动画片。"),
                                ("附近有公园吗？", "推荐您去朝阳公园。"), ("帮我订个闹钟。", "好的，已经订好了。")]):
        say(store, embedder, "u", f"s{n + 2}", [("用户", a), ("助手", b)], start + timedelta(days=n + 1))
    rebuild_index(store)
    query = "你推荐老北京炸酱面馆那次，我一开始提了什么要求？"
    with_step = [h.id for h in Recaller(store, embedder).search(query, ["u"], limit=3, now=NOW)]
    without = [h.id for h in Recaller(store, embedder, RecallSettings(expand_weight=0, session_weight=0)).search(query, ["u"], limit=3, now=NOW)]
    session_only = [h.id for h in Recaller(store, embedder, RecallSettings(expand_weight=0, session_weight=0.3)).search(
        query, ["u"], limit=3, now=NOW)]
    assert with_step[0] == ids[1] and ids[0] in with_step
    assert ids[0] not in without
    # Session evidence alone reaches it too: the request is in the session the hit found.
    assert ids[0] in session_only


def test_neighbours_never_cross_a_session_or_a_space(store, embedder):
    start = NOW - timedelta(days=2)
    mine = say(store, embedder, "u", "s1", [("用户", "我养了一只猫。"), ("用户", "它叫小白。")], start)
    say(store, embedder, "v", "s1", [("用户", "我的密码提示是生日。")], start + timedelta(seconds=15))
    say(store, embedder, "u", "s2", [("用户", "我明天去牙医那里。")], start + timedelta(seconds=45))
    rebuild_index(store)
    hits = Recaller(store, embedder).search("我养的猫", ["u"], limit=10, now=NOW)
    assert {h.space_id for h in hits} == {"u"}
    assert mine[1] in {h.id for h in hits}


def test_content_mmr_keeps_distinct_items_and_pushes_a_repeat_down():
    scores = {"a": 1.0, "a2": 0.98, "b": 0.9, "c": 0.85, "d": 0.8}
    words = {"a": frozenset("我 在 上海 看 了 话剧".split()), "a2": frozenset("我 在 上海 看 了 话剧 很 好看".split()),
             "b": frozenset("我 在 上海 参加 马拉松".split()), "c": frozenset("我 在 上海 吃 了 小笼包".split()),
             "d": frozenset("我 在 上海 逛 了 外滩".split())}
    order = ranking.content_mmr(scores, words, 4, 0.7, frozenset({"上海"}) | STOPWORDS)
    assert order == ["a", "b", "c", "d"]
    assert ranking.content_mmr(scores, words, 5, 1.0) == ["a", "a2", "b", "c", "d"]


def test_a_list_query_returns_every_matching_item(store, embedder):
    start = NOW - timedelta(days=40)
    events = ["我在上海看了一场话剧。", "我在上海参加了一次马拉松。", "我在上海吃了小笼包。", "我在上海逛了外滩。", "我在上海听了一场音乐会。"]
    lines = [("用户", e) for e in events] + [("用户", "我在上海看了一场话剧，很好看。"), ("用户", "我在上海看了一场话剧，演员很棒。")]
    lines += [("用户", t) for t in ("我在杭州看了西湖。", "我在北京吃了烤鸭。", "我在广州喝了早茶。", "我在成都吃了火锅。")]
    ids = say(store, embedder, "u", "s1", lines, start)
    rebuild_index(store)
    hits = Recaller(store, embedder).search("我在上海都参加过哪些活动？", ["u"], limit=5, now=NOW)
    assert set(ids[:5]) == {h.id for h in hits}


def test_neighbours_lend_less_the_further_they_are():
    """lend = weight * decay ** (distance - 1) * score: the turn right after a hit gets more
    than the one two turns away, and a neighbour keeps its own score when that is higher."""
    scores = {"hit": 1.0, "own": 0.9}
    near = {"hit": [("next", 1), ("prev", 1), ("two", 2), ("own", 1)]}
    out = ranking.expand_to_neighbours(scores, near, top=1, weight=0.6, decay=0.5)
    assert out["next"] == out["prev"] == 0.6 and out["two"] == 0.3 and out["own"] == 0.9
    added = ranking.expand_to_neighbours(scores, near, top=1, weight=0.6, decay=0.5, add=1.0)
    assert added["own"] == 0.9 + 0.6 and added["two"] == 0.3
    # A share of the smaller one: a neighbour relevant itself passes one that is only lent to.
    half = ranking.expand_to_neighbours(scores, near, top=1, weight=0.6, decay=0.5, add=0.5)
    assert half["own"] == 0.9 + 0.5 * 0.6 and half["next"] == 0.6 and half["hit"] == 1.0
    # Only the `top` best lend: "own" is second, so its neighbours get nothing.
    assert ranking.expand_to_neighbours(scores, {"own": [("x", 1)]}, top=1) == scores


def test_the_second_step_reaches_the_answer_two_turns_after_the_entity(store, embedder):
    """"How much is a meal at X?": the assistant names X, the user asks "how much per head
    here?", and the answer ("22 yuan") names neither X nor the question's words. It is two
    turns after the hit: the window of 2 lends it weight * decay, the window of 1 nothing."""
    start = NOW - timedelta(days=30)
    ids = say(store, embedder, "u", "s1", [("用户", "我想吃小炸糕，帮我推荐一家餐馆。"), ("助手", "吃小炸糕推荐去火盆锅豆腐宴这家。"),
                                           ("用户", "这家店的人均消费是多少？"), ("助手", "在22元左右。"), ("用户", "好的谢谢。")], start)
    other = say(store, embedder, "u", "s2", [("用户", "火盆锅豆腐宴好吃吗？")], start + timedelta(seconds=75))
    near = store.read(lambda c: _neighbours(c, {ids[1]: "s1"}, ["u"], 2)[0])
    assert sorted(near[ids[1]]) == sorted([(ids[0], 1), (ids[2], 1), (ids[3], 2)])  # never the other session's
    assert other[0] not in {d for d, _ in near[ids[1]]}
    assert store.read(lambda c: _neighbours(c, {ids[1]: "s1"}, ["u"], 1)[0])[ids[1]] in ([(ids[0], 1), (ids[2], 1)], [(ids[2], 1), (ids[0], 1)])
    rebuild_index(store)
    hits = Recaller(store, embedder, RecallSettings(expand_window=2, expand_decay=0.9, expand_top=2)).search(
        "火盆锅豆腐宴吃一顿一个人得多少钱？", ["u"], limit=5, now=NOW)
    by_id = {h.id: h.score for h in hits}
    assert hits[0].id in (ids[1], other[0]) and ids[3] in by_id


@settings(max_examples=200, deadline=None)
@given(NUMERALS)
def test_the_index_side_normalisation_is_idempotent(text):
    """Tokenising text whose numerals are already Arabic gives the same tokens: a memory
    retokenised (bench --retokenize, a rebuild) keeps its terms."""
    assert tokenize(normalize_numbers(text)) == tokenize(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PARTICLES), st.sampled_from(CONTENT)), max_size=6), st.sampled_from(CONTENT))
def test_bigrams_only_add_terms_and_never_a_question_word(pieces, word):
    query = "".join([*pieces, word])  # glued: a pair across a particle must not appear either
    plain, more = query_terms(query), query_terms(query, bigrams=True)
    assert set(plain) <= set(more)
    assert not set(more) & ZH_QUESTION_WORDS


_ROWS = st.lists(st.tuples(st.sampled_from(["s1", "s2", "s3"]), st.integers(0, 12)), min_size=1, max_size=25)


@settings(max_examples=300, deadline=None)
@given(_ROWS, st.integers(1, 3), st.data())
def test_session_neighbours_are_the_nearest_of_the_same_session(rows, window, data):
    """For every hit: only chunks of its own session, at most `window` on each side, numbered
    1..k by nearness, and no chunk left out on a side is nearer than one taken."""
    base = datetime(2026, 1, 1)
    chunks = [(f"c{i}", session, base + timedelta(minutes=m)) for i, (session, m) in enumerate(rows)]
    hits = data.draw(st.lists(st.sampled_from([c[0] for c in chunks]), unique=True, min_size=1, max_size=4))
    where = {c[0]: c for c in chunks}
    got = ranking.session_neighbours(hits, chunks, window)
    for hit in hits:
        _, session, at = where[hit]
        near = got.get(hit, [])
        for side in (lambda t: t < at, lambda t: t >= at):
            taken = [(d, dist) for d, dist in near if side(where[d][2])]
            assert sorted(dist for _, dist in taken) == list(range(1, len(taken) + 1))
            assert all(where[d][1] == session and d != hit for d, _ in taken)
            pool = [c for c in chunks if c[1] == session and c[0] != hit and side(c[2])]
            assert len(taken) == min(window, len(pool))
            if taken:
                worst = max(abs((where[d][2] - at).total_seconds()) for d, _ in taken)
                assert all(abs((c[2] - at).total_seconds()) >= worst for c in pool if c[0] not in dict(taken))


def test_a_query_inside_a_conversation_is_built_from_the_persons_recent_messages():
    """The person's newest message first, then the content words of their earlier ones (newest
    first); the assistant's replies stay out; a message with no history is its own query."""
    from memory.recall.query import recall_query

    assert recall_query([], "Where did I park?") == "Where did I park?"
    history = [("user", "I'm going to perform a magic trick at the party!"),
               ("assistant", "That's fantastic! Ask Marco at the Blue Lantern for a costume."),
               ("user", "I get a bit nervous too."),
               ("assistant", "Try taking a deep breath before the show, like Ana did.")]
    q = recall_query(history, "What should I wear?")
    lines = q.splitlines()
    assert lines[:3] == ["What should I wear?", "bit nervous", "i'm going perform magic trick party"]
    assert len(lines) == 3 and "breath" not in q and "Marco" not in q
    assert len(recall_query(history, "x" * 5000)) <= 1000


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), st.text(max_size=300)), max_size=12), st.text(max_size=1500))
def test_a_built_query_starts_with_the_message_and_stays_within_its_size(history, text):
    from memory.recall.query import QUERY_CHARS, recall_query

    q = recall_query(history, text)
    assert len(q) <= QUERY_CHARS
    assert q.startswith(text[:QUERY_CHARS])


def test_a_follow_up_finds_what_the_exchange_is_about(store, embedder):
    """"What should I wear for it tonight?" is about the magic show said two messages earlier:
    searched alone it finds the notes about clothes; built from the exchange it finds the show."""
    from memory.recall.query import recall_query

    start = NOW - timedelta(days=40)
    notes = ["Last New Year's party I did a card trick on stage and everyone cheered.",
             "I should wear my grey coat when it rains.", "I wear glasses for reading.", "I bought a new blue jacket.",
             "My favourite shoes are the white sneakers.", "I never wear a tie at work.", "My scarf is red wool.",
             "I need a dress for my cousin's wedding.", "I lost my hat at the park."]
    ids = [say(store, embedder, "u", f"s{i}", [("用户", t)], start + timedelta(days=i))[0] for i, t in enumerate(notes)]
    rebuild_index(store)
    history = [("user", "I'm going to perform a magic trick at the New Year's party!"),
               ("assistant", "That's fantastic! You'll be great."),
               ("user", "I get a bit nervous. Any suggestions to help me relax before the show?"),
               ("assistant", "Take a deep breath and imagine the applause.")]
    text = "By the way, what do you think I should wear for it tonight?"
    recaller = Recaller(store, embedder, RecallSettings())
    alone = [h.id for h in recaller.search(text, ["u"], limit=3, now=NOW)]
    built = [h.id for h in recaller.search(recall_query(history, text), ["u"], limit=3, now=NOW)]
    assert ids[0] not in alone
    assert built[0] == ids[0]
