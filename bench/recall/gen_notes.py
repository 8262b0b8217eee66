#!/usr/bin/env python3
"""Generate a second long-conversation recall set, made differently from gen.py (deterministic, seeded).

Nine conversations of two shapes: five are one person talking with an AI assistant over
~30 dated sessions (short user turns, assistant replies of 30-120 words), four are a group
chat of three or four friends over ~25 dated sessions. The people, the life domains (work
projects, health, money, home repair, hobbies, travel plans, food restrictions and
preferences, the software people use) and above all the questions differ from gen.py's: the
questions paraphrase instead of echoing the turn ("What kind of vehicle did Callum buy?"
for "Finally picked up a used Subaru Outback on Saturday"), ask about the assistant's (or a
friend's) advice, refer to things indirectly, have their answer in a turn that replies to
someone else's question, follow topics that change over time ("now" against "at first"),
span sessions, or need the session's date.

The output is in the format eval.py reads (--data DIR): conv-N.jsonl (one wmreplay
`dialog` record a line, in ts_ms order) and questions.jsonl. Python 3 standard library only.

    python3 bench/recall/gen_notes.py               # writes bench/recall/data-notes/
    python3 bench/recall/gen_notes.py --show 30     # also prints 30 random questions with their evidence
    python3 bench/recall/eval.py --data bench/recall/data-notes

Nothing here knows about any search engine; the self-check at the end measures how many of
a question's content words appear in its evidence turns, with its own crude stemmer.
"""
import argparse
import datetime as dt
import json
import os
import random
import re
import sys
import time

SEED = 20261129
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]
NUM = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
ASSISTANT = "Assistant"

# --------------------------------------------------------------------------------------
# People (no name here is one of gen.py's)
# --------------------------------------------------------------------------------------

CONVS = [
    ("assistant", [("Mireille", "f")]),
    ("group", [("Odette", "f"), ("Rashid", "m"), ("Linnea", "f"), ("Cormac", "m")]),
    ("assistant", [("Gideon", "m")]),
    ("group", [("Saoirse", "f"), ("Emeka", "m"), ("Valentina", "f")]),
    ("assistant", [("Yuki", "f")]),
    ("group", [("Henrik", "m"), ("Anouk", "f"), ("Tariq", "m"), ("Delphine", "f")]),
    ("assistant", [("Callum", "m")]),
    ("group", [("Ximena", "f"), ("Rupert", "m"), ("Ayodele", "f")]),
    ("assistant", [("Beatriz", "f")]),
]
PRON = {"f": dict(sub="she", obj="her", pos="her"), "m": dict(sub="he", obj="him", pos="his")}
SIDE_F = ["Solveig", "Ottilie", "Annika", "Henrietta", "Lorna", "Maribel", "Nell", "Philippa", "Sunniva", "Trudy", "Una",
          "Winifred", "Yolanda", "Agnes", "Brigid", "Constance", "Dolores", "Eunice", "Greer", "Harriet", "Jolene", "Lucinda",
          "Meredith", "Odile", "Petra", "Magda"]
SIDE_M = ["Ambrose", "Barnaby", "Cyrus", "Dashiell", "Ewan", "Fergus", "Gustavo", "Horace", "Ignatius", "Jago", "Kwame",
          "Lorcan", "Mortimer", "Nikhil", "Osric", "Percival", "Rufus", "Stellan", "Thaddeus", "Ulrich", "Vikram", "Wilbur",
          "Yannick", "Zoltan", "Alistair", "Crispin"]


def cap(s):
    return s[:1].upper() + s[1:]


def day(d):
    return f"{WEEKDAYS[d.weekday()]} {d.day} {MONTHS[d.month - 1]} {d.year}"


def ordinal(k):
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def art(x):
    return "an" if x[:1].lower() in "aeiou" else "a"


def money(x):
    return f"${x:,}"


# --------------------------------------------------------------------------------------
# Sessions, turns and the helper that stages use to talk
# --------------------------------------------------------------------------------------

class Turn:
    __slots__ = ("speaker", "text", "sess", "dia_id")

    def __init__(self, speaker, text, sess):
        self.speaker, self.text, self.sess, self.dia_id = speaker, text, sess, None


class Sess:
    def __init__(self, idx, date):
        self.idx, self.date, self.turns = idx, date, []

    def add(self, speaker, text):
        t = Turn(speaker, text, self)
        self.turns.append(t)
        return t


class Person:
    def __init__(self, name, g):
        self.name, self.g = name, g
        p = PRON[g]
        self.sub, self.obj, self.pos = p["sub"], p["obj"], p["pos"]


ASST_OPEN = {
    "pos": ["That's wonderful news, {n}!", "Congratulations, that's a real milestone.", "I'm really glad to hear that.",
            "That's great progress, {n}.", "What a good outcome!", "Oh, that's lovely to hear."],
    "neg": ["I'm sorry, that sounds frustrating.", "Oh no, that's a stressful thing to deal with.", "That sounds genuinely hard, {n}.",
            "Ugh, I'm sorry you're dealing with that.", "That's a rough week, and it makes sense that you're worn out."],
    "neu": ["Thanks for the update.", "That makes sense.", "Got it, thanks for the context.", "Noted, {n}.",
            "Okay, let's think this through together.", "Thanks for filling me in, {n}."],
    "greet": ["Welcome back, {n}! What's on your mind today?", "Hello again, {n}. How can I help today?",
              "Hi {n}, good to hear from you. What would you like to work on?", "Good to see you, {n}. Where would you like to start?"],
    "bye": ["You're very welcome, {n}.", "Anytime, that's what I'm here for.", "Glad it helped, {n}.", "My pleasure, {n}. Take care."],
}
ASST_CLOSE = ["If you'd like, I can put together a short checklist for this.", "Let me know how it goes, and we can adjust from there.",
              "Would it help if I drafted a simple plan for the next couple of weeks?", "Feel free to come back with any follow-up questions.",
              "Keep me posted on how things develop.", "Happy to go deeper on any of this if it's useful."]
ASST_PAD = {
    "work": ["It's worth writing down what a good result would look like before you start, so you know when you're done.",
             "Most people overestimate how much others notice small stumbles; what sticks is whether you were clear and prepared.",
             "Try to separate what's in your control from what isn't, and put your energy into the first list.",
             "A short written summary after any important conversation tends to prevent misunderstandings later.",
             "Career decisions rarely have to be perfect; more often than it feels, they're good enough and reversible.",
             "Protecting a couple of focused hours a day usually matters more than any productivity system.",
             "If you feel stuck, asking one trusted colleague for honest feedback can be surprisingly clarifying.",
             "Keep a simple log of your wins at work; it makes reviews and salary conversations much easier."],
    "health": ["Of course, I'm not a doctor, so if anything gets worse or doesn't improve within a couple of weeks, it's worth getting checked.",
               "Small, consistent habits tend to beat dramatic changes that are hard to keep up.",
               "Sleep, hydration and stress often interact, so improving one can help the others too.",
               "It may help to keep a short daily note of symptoms so patterns become easier to spot.",
               "Recovery is rarely a straight line, so a bad day doesn't mean you're back at square one.",
               "When in doubt, a pharmacist can be a quick and underrated source of advice.",
               "Be gentle with yourself while you figure out what works for your body.",
               "Writing down your questions before an appointment makes it easier to get real answers from the doctor."],
    "money": ["Automating transfers on payday tends to work better than relying on willpower at the end of the month.",
              "It's worth keeping a small emergency buffer so one surprise bill doesn't undo your progress.",
              "Write down the numbers, even roughly; vague worries about money are usually worse than the real figures.",
              "Interest rates and fees add up quietly, so it's worth reading the fine print once a year.",
              "Progress with money is often slow and then sudden, so try not to judge it month by month.",
              "If you share finances with someone, a short monthly check-in can prevent a lot of friction.",
              "Keep receipts and paperwork in one folder; future you will be grateful at tax time.",
              "Any plan you'll actually follow beats a perfect one you abandon after three weeks."],
    "home": ["Before any repair, it helps to take photos of the problem for your records and for quotes.",
             "Getting at least two or three quotes is usually worth the extra phone calls.",
             "Ask any contractor about warranties, permits and who cleans up afterwards.",
             "Small leaks and cracks tend to get more expensive the longer they're left alone.",
             "It's worth checking whether your insurance or lease covers any of this before paying out of pocket.",
             "A basic toolkit and a good flashlight solve a surprising share of household problems.",
             "If you rent, put any request to your landlord in writing so there's a record.",
             "Older buildings always have one more surprise behind the wall, so leave some slack in the budget."],
    "travel": ["Booking a refundable option for the first night can take a lot of pressure off planning.",
               "It's worth checking passport validity and entry rules early; some countries want six months left on it.",
               "Travel insurance is boring until the day you need it.",
               "Leaving one unplanned day in the middle of a trip often ends up being the best one.",
               "Local markets and bakeries tend to be the cheapest way to eat well almost anywhere.",
               "Download offline maps before you go; mobile data abroad can be patchy or expensive.",
               "Packing light makes every train connection and staircase easier.",
               "Shoulder season often means smaller crowds and lower prices with only slightly less reliable weather."],
    "tech": ["Whatever tool you choose, exporting your data regularly is cheap insurance.",
             "Most apps are fine; the one you'll actually open every day is the right one.",
             "Try not to migrate everything at once; move what you use weekly and archive the rest.",
             "Check the backup and sync settings early, before you rely on anything important.",
             "Keyboard shortcuts for the three actions you do most will save more time than any new feature.",
             "If a setup feels fragile, write down the steps you took so you can repeat them.",
             "Software updates are annoying, but they quietly fix a lot of problems.",
             "Reading the first page of the documentation usually answers half of the questions people search for."],
    "hobby": ["The early, clumsy stage of any hobby is part of the fun, even when it doesn't feel like it.",
              "Local clubs and online forums are full of people who love answering beginner questions.",
              "It helps to set tiny goals so you can notice progress week to week.",
              "Secondhand gear is often a great way to start without overspending.",
              "Keeping a small notebook of what you tried and what happened speeds up learning a lot.",
              "Hobbies are allowed to just be fun; they don't need to become side projects.",
              "Short, regular sessions usually teach more than occasional marathon ones.",
              "Sharing what you make, even imperfect things, tends to keep motivation up."],
    "food": ["When cooking for a group, it's easiest to build the menu around what everyone can eat and add extras on the side.",
             "Reading labels becomes quick once you know the usual hiding places for an ingredient.",
             "Restaurants are generally happy to adapt dishes if you tell them clearly when you order.",
             "Batch-cooking a couple of basics on Sunday can make weekday meals much easier.",
             "Taste preferences do change over time, so it's worth retrying things occasionally.",
             "A well-stocked spice shelf makes simple meals feel much more varied.",
             "Keeping a few safe snacks in your bag helps when plans change.",
             "Meal planning doesn't need to be elaborate; even three planned dinners a week helps."],
    "social": ["People usually remember warmth more than polish.", "It's okay to ask for help; most friends are glad to be asked.",
               "Keeping it short and sincere tends to land better than trying to be perfect.",
               "A quick message to say thank you afterwards goes a long way.",
               "Boundaries are easier to keep when they're stated kindly and early.",
               "Planning something small and regular often beats one big event.",
               "Listening well is often more useful than having the right advice.",
               "Everyone gets nervous about these things; it usually means you care."],
    "gen": ["I'm always happy to help you think things through, whether it's something practical or just getting thoughts in order.",
            "There's no such thing as a silly question here, so ask away.",
            "Sometimes just writing a problem down is half of solving it.",
            "We can take things one step at a time.",
            "I can also summarize anything we discuss so you have it for later.",
            "If something we talked about before has changed, just let me know and we'll adjust."],
}
GRP_REACT = {
    "pos": ["omg congrats!!", "love that for you", "wait that's amazing", "yesss", "proud of you {n}", "🎉🎉", "look at you go",
            "ok that's huge", "best news all week", "so happy for you"],
    "neg": ["ugh noooo", "oh no {n} 😭", "that's the worst", "oof", "sending hugs", "that's so annoying", "nooo why", "I'm so sorry"],
    "neu": ["huh, interesting", "oh nice", "ooh", "ok noted", "makes sense", "fair", "good to know", "ha", "wait really?", "classic {n}"],
}
ASK_OPEN = ["Before we dive in, a quick follow-up, {n}.", "Good to hear from you. One thing I wanted to ask about first.",
            "Hi {n}. I've been curious about something from last time.", "Can I follow up on something from before?"]
USER_TAILS = {
    "work": ["Any advice?", "Thoughts?", "Wish me luck."],
    "health": ["Any tips?", "Thoughts?", "Just keeping you posted."],
    "money": ["Thoughts?", "Any advice?", "Just keeping you posted."],
    "home": ["Thoughts?", "Any advice?", "Wish me luck."],
    "travel": ["Any tips?", "Thoughts?", "Any suggestions?"],
    "tech": ["Thoughts?", "Any tips?", "Just keeping you posted."],
    "hobby": ["Any beginner tips?", "Is that a silly thing to get excited about?", "Thoughts?"],
    "food": ["Can you keep that in mind for recipes?", "Just so you know for meal ideas.", "Worth remembering."],
    "social": ["Any tips?", "Thoughts?", "Wish me luck."],
}
USER_LEADS = ["", "", "", "Okay, different topic. ", "Quick update: ", "Another thing. ", "Oh, before I forget. ", "Random one: ", "Update! "]


def words_of(s):
    return re.findall(r"[^\W_]+", s)


def asst_text(rng, core, dom, mood, name, lo=34, hi=100):
    """An assistant reply: an opener, the core (the part that may be evidence), generic sentences, a closer; 30-120 words."""
    parts = [rng.choice(ASST_OPEN[mood]).format(n=name)]
    if core:
        parts.append(core)
    target = rng.randint(lo, hi)
    pads = rng.sample(ASST_PAD.get(dom, ASST_PAD["gen"]), 5 if dom != "gen" else 3)
    if dom != "gen":
        pads.append(rng.choice(ASST_PAD["gen"]))
    n = sum(len(words_of(p)) for p in parts)
    for p in pads:
        if n >= target:
            break
        k = len(words_of(p))
        if n + k > 108:
            continue
        parts.append(p)
        n += k
    if n < 100 and mood not in ("greet", "bye") and rng.random() < 0.6:
        parts.append(rng.choice(ASST_CLOSE))
    return " ".join(parts)


class Talk:
    """What a stage uses to add turns to its session and to write questions about them."""

    def __init__(self, cv, sess, P):
        self.cv, self.sess, self.P, self.rng = cv, sess, P, cv.rng
        self.n, self.sub, self.obj, self.pos = P.name, P.sub, P.obj, P.pos
        self.Sub = cap(P.sub)
        self.d = sess.date.date()
        self.asst = cv.kind == "assistant"
        self.floor = None   # the date of the arc's previous stage's session: past events happen after it
        self.limit = None   # the date of the arc's next stage's session: planned events happen before it

    def c(self, *xs):
        return self.rng.choice(xs)

    def cq(self, *xs):
        """A question's phrasing: the last one (the closest to the words of the turn, when there is one) 45% of the time."""
        if len(xs) > 1 and self.rng.random() < 0.45:
            return xs[-1]
        return self.rng.choice(xs[:-1] if len(xs) > 1 else xs)

    def say(self, text, dom=None, tail=0.35):
        """The stage's owner speaks; a user talking to the assistant often adds a lead-in or a request."""
        if self.asst:
            text = self.rng.choice(USER_LEADS) + text
            if dom and self.rng.random() < tail:
                text += " " + self.rng.choice(USER_TAILS[dom])
        return self.sess.add(self.n, text)

    def other(self, grp=None, asst=None, dom="gen", mood="neu", who=None):
        """The assistant answers (30-120 words around `asst`), or a friend (a line of `grp`, else a reaction)."""
        if self.asst:
            return self.sess.add(ASSISTANT, asst_text(self.rng, asst or "", dom, mood, self.n))
        spk = who or self.friend()
        if isinstance(grp, (list, tuple)):
            grp = self.rng.choice(grp)
        if not grp:
            grp = self.rng.choice(GRP_REACT[mood]).format(n=self.n)
        return self.sess.add(spk, grp)

    def ask(self, grp, asst, dom="gen", p=1.0):
        """Someone else asks about the topic (its words are in this turn; the answer, the owner's next turn, may not repeat them)."""
        if self.rng.random() >= p:
            return None
        if not self.asst:
            return self.other(grp=grp)
        rng = self.rng
        last = self.sess.turns[-1] if self.sess.turns else None
        if last is not None and last.speaker == ASSISTANT and len(words_of(last.text)) + len(words_of(asst)) <= 112:
            # the assistant has the floor already: the follow-up question ends its turn
            last.text += " " + rng.choice(["By the way, ", "Also, I wanted to follow up: ", "One more thing from last time: "]) + asst[0].lower() + asst[1:]
            return last
        parts = [rng.choice(ASK_OPEN).format(n=self.n)]
        n = len(words_of(parts[0])) + len(words_of(asst))
        for pad in rng.sample(ASST_PAD.get(dom, ASST_PAD["gen"]), 3):
            if n >= 30:
                break
            parts.append(pad)
            n += len(words_of(pad))
        parts.append(asst)
        return self.sess.add(ASSISTANT, " ".join(parts))

    def react(self, mood="neu", dom="gen"):
        t = self.other(mood=mood, dom=dom)
        if not self.asst and self.rng.random() < 0.35:
            self.sess.add(self.friend(exclude=t.speaker), self.rng.choice(GRP_REACT[mood]).format(n=self.n))
        return t

    def friend(self, exclude=None):
        xs = [p.name for p in self.cv.people if p.name != self.n and p.name != exclude]
        return self.rng.choice(xs)

    def who(self, turn):
        """How a question names the speaker of an advice turn."""
        if turn.speaker == ASSISTANT:
            return self.rng.choice(["the assistant", "the AI", "the assistant", "the chatbot"])
        return turn.speaker

    def past(self, kinds=("yest", "dby", "onwd", "lastwd", "ndays", "weekago", "morning", "wdpart")):
        """(phrase, date) for something that happened before this session, after the arc's previous stage."""
        rng, d = self.rng, self.d
        w = dict(yest=5, dby=2, onwd=5, lastwd=3, ndays=2, weekago=1, morning=1, wdpart=3)
        k = rng.choices(kinds, weights=[w[x] for x in kinds])[0]
        cands = []
        if k == "yest":
            cands = [("yesterday", 1)]
        elif k == "dby":
            cands = [("the day before yesterday", 2)]
        elif k == "morning":
            cands = [("this morning", 0)]
        elif k == "ndays":
            cands = [(f"{NUM[n]} days ago", n) for n in (3, 4, 5)]
        elif k == "weekago":
            cands = [("a week ago today", 7)]
        else:
            for delta in range(3 if k == "lastwd" else 2, 7):
                wd = WEEKDAYS[(d - dt.timedelta(days=delta)).weekday()]
                if k == "lastwd":
                    cands.append((f"last {wd}", delta))
                elif k == "wdpart":
                    cands.append((f"on {wd} {rng.choice(['night', 'morning', 'afternoon', 'evening'])}", delta))
                else:
                    cands.append((rng.choice([f"on {wd}", f"this past {wd}"]), delta))
        cands = [(ph, n) for ph, n in cands if self.floor is None or d - dt.timedelta(days=n) > self.floor]
        if not cands:
            cands = [("yesterday", 1)] if self.floor is None or d - dt.timedelta(days=1) > self.floor else [("this morning", 0)]
        ph, n = rng.choice(cands)
        return ph, d - dt.timedelta(days=n)

    def future(self, kinds=("tom", "dat", "onwd", "weekfrom", "ondate", "tendays")):
        """(phrase, date) for something planned after this session, before the arc's next stage."""
        rng, d = self.rng, self.d
        w = dict(tom=3, dat=1, onwd=4, weekfrom=2, ondate=4, tendays=1)
        k = rng.choices(kinds, weights=[w[x] for x in kinds])[0]
        if k == "tom":
            cands = [("tomorrow", 1)]
        elif k == "dat":
            cands = [("the day after tomorrow", 2)]
        elif k == "weekfrom":
            cands = [("a week from today", 7)]
        elif k == "tendays":
            cands = [("ten days from now", 10)]
        elif k == "ondate":
            cands = [(f"on the {ordinal((d + dt.timedelta(days=n)).day)}", n) for n in range(5, 21)]
        else:
            cands = [(rng.choice([f"on {WEEKDAYS[(d + dt.timedelta(days=n)).weekday()]}", f"this {WEEKDAYS[(d + dt.timedelta(days=n)).weekday()]}"]), n) for n in range(2, 7)]
        cands = [(ph, n) for ph, n in cands if self.limit is None or d + dt.timedelta(days=n) < self.limit]
        if not cands:
            cands = [("tomorrow", 1)]
        ph, n = rng.choice(cands)
        return ph, d + dt.timedelta(days=n)

    def ans(self, x):
        rel = (self.d - x).days
        if rel == 0:
            how = "the day of the session"
        elif rel > 0:
            how = f"{rel} day{'s' if rel > 1 else ''} before the session of {day(self.d)}"
        else:
            how = f"{-rel} day{'s' if rel < -1 else ''} after the session of {day(self.d)}"
        return f"{day(x)} ({how})"

    def q(self, cat, question, ev, answer):
        self.cv.questions.append(dict(category=cat, question=question, ev=list(ev), answer=answer, owner=self.n))

    def dated(self, x, label, turn):
        """An event with a date, for the "which came first" questions: label is a noun phrase naming it."""
        self.cv.dated.append((x, self.n, label, turn))

    def tag(self, key, turn, text):
        """A fact that an aggregate (multi-hop) question may gather with others of its kind."""
        self.cv.tags.setdefault((self.n, key), []).append((turn, text))


# --------------------------------------------------------------------------------------
# Arcs: a topic in a person's life, told over one to four sessions. Each arc is a function
# that picks its details and returns its stages; a stage renders turns into a session
# (through a Talk) and writes the questions those turns answer.
# --------------------------------------------------------------------------------------

ARCS = {}


def arc(name, dom, weight=1.0):
    def deco(fn):
        ARCS[name] = (fn, dom, weight)
        return fn
    return deco


class ArcCtx:
    def __init__(self, cv, P):
        self.cv, self.P, self.rng = cv, P, cv.rng
        self.st = {}      # turns and facts shared between an arc's stages
        self.echo = []    # later mentions of the topic that answer nothing (filler)
        self.maxgap = None  # at most this many sessions between two stages (things that follow soon: a delivery, a recovery)

    def c(self, *xs):
        return self.rng.choice(xs)

    def pick(self, key, pool):
        """A detail from pool, not yet used in this conversation if possible."""
        used = self.cv.used.setdefault(key, [])
        xs = [i for i in range(len(pool)) if i not in used] or list(range(len(pool)))
        i = self.rng.choice(xs)
        used.append(i)
        return pool[i]

    def side(self, g=None):
        g = g or self.rng.choice("fm")
        name = self.pick("side_" + g, SIDE_F if g == "f" else SIDE_M)
        return name, PRON[g]


# ---------------------------------------------------------------------------- work

COMPANIES = ["Corvid Labs", "Halyard Freight", "Bellwether Mutual", "Northbeam Analytics", "Tidewater Health", "Parable Games",
             "Kestrel Robotics", "Larkspur Media", "Ironbark Solar", "Quillon Bank", "Fernway Logistics", "Saltmarsh Studios"]
ROLES = ["data analyst", "UX researcher", "operations manager", "technical writer", "product designer", "grant coordinator",
         "QA lead", "marketing coordinator", "supply chain planner"]
INTERVIEW_RESULT = [
    ("Honestly better than I expected. They want me back for a second round with the director.", "better than expected; they invited {obj} back for a second round with the director"),
    ("I blanked on one question about pivot tables, but they still asked me back for a final round.", "{sub} blanked on one question but was asked back for a final round"),
    ("Weirdly fun? We talked about sourdough for ten minutes. They're setting up a second conversation with the team lead.", "well; they are setting up a second conversation with the team lead"),
]


@arc("interview", "work")
def arc_interview(a):
    a.maxgap = 3
    co, role = a.pick("co", COMPANIES), a.pick("role", ROLES)
    res = a.c(*INTERVIEW_RESULT)
    pct = a.c(12, 15, 18, 20, 25)
    a.echo = ["Still can't believe I'll be changing jobs. My current desk plant is coming with me.",
              "I keep rewriting my LinkedIn headline and then deleting it."]

    def s0(t):
        ph, x = t.past()
        f = t.say(t.c(f"I sent in an application for {art(role)} {role} opening at {co} {ph}. Long shot, but their team seems lovely.",
                      f"Okay, don't laugh: {ph} I applied to {co}. It's {art(role)} {role} role and the pay is way better than mine."), dom="work")
        if t.asst:
            adv = t.other(asst=t.c("For the next steps, lead your cover note with one concrete result you achieved, ideally a number you moved, rather than a list of duties.",
                                   "While you wait, prepare three short stories from your current job that show impact, each with a situation, what you did and the result."),
                          dom="work", mood="pos")
            t.q("single-hop", f"What did {t.who(adv)} tell {t.n} to do after sending off the job application?", [adv],
                "lead the cover note with one concrete result / prepare three short impact stories")
        else:
            t.react("pos")
        t.q("single-hop", t.cq(f"Which employer was {t.n} hoping to join?", f"Where was {t.n} trying to get hired?", f"Which company did {t.n} apply to?"), [f], co)
        t.q("single-hop", t.cq(f"What position was {t.n} going for?", f"What job title was {t.n} pursuing?", f"What role did {t.n} apply for?"), [f], role)
        t.q("temporal", f"When did {t.n} put in for the new position?", [f], t.ans(x))
        t.dated(x, f"{t.n} applying for the {role} job", f)
        t.tag("work", f, f"applied for {art(role)} {role} role at {co}")
        a.st["apply"] = f

    def s1(t):
        ph, x = t.future(("tom", "dat", "onwd", "ondate"))
        f = t.say(t.c(f"{co} called back! Interview is {ph}, 10 am, on video.", f"Got an interview with {co} {ph}. Trying very hard not to spiral."), dom="work")
        t.react("pos", "work")
        t.q("temporal", t.c(f"When was {t.n} scheduled to meet the hiring team?", f"On what date was {t.n} due to talk with the recruiters?"), [f], t.ans(x))
        t.dated(x, f"{t.n}'s first interview with {co}", f)

    def s2(t):
        t.ask([f"{t.n}!! how did the interview go", f"wait wasn't the {co} interview this week? how'd it go"],
              f"Last time you mentioned the interview with {co}. How did it go?", dom="work")
        f = t.say(res[0])
        t.react("pos")
        t.q("single-hop", t.cq(f"How did {t.n}'s conversation with the hiring team at {co} go?", f"How did {t.n}'s job interview go?"), [f],
            res[1].format(sub=t.sub, obj=t.obj))
        a.st["res"] = f

    def s3(t):
        ph, x = t.future(("weekfrom", "ondate", "tendays"))
        f = t.say(t.c(f"I got it!! Starting at {co} {ph}. It's about {pct} percent more than I make now.",
                      f"Signed the offer from {co}. First day is {ph}, and the raise is around {pct}%."), dom="work")
        t.react("pos", "work")
        t.q("single-hop", t.cq(f"How big a pay increase comes with {t.n}'s new job?", f"By how much will {t.n}'s salary go up?", f"How much more will {t.n} make in the new job?"), [f], f"about {pct}%")
        t.q("temporal", f"When does {t.n} begin at {co}?", [f], t.ans(x))
        t.q("multi-hop", f"What role did {t.n} apply for, and did {t.sub} get it?", [a.st["apply"], f], f"{role} at {co}; yes, {t.sub} got the offer")
        t.q("multi-hop", f"What happened between {t.n}'s first interview and the offer?", [a.st["res"], f], "invited back for another round, then an offer with a raise")
        t.q("open-domain", f"Is {t.n} likely to hand in {t.pos} notice at {t.pos} current employer soon?", [f], f"Yes, {t.sub} accepted an offer from {co}")
        t.tag("work", f, f"accepted the offer from {co}")
    return [s0, s1, s2, s3]


PROJECTS = ["warehouse automation", "new billing system", "customer portal redesign", "data migration", "loyalty program pilot",
            "office relocation", "vendor consolidation", "field sales app"]
PRES_RESULT = [("They approved the budget for phase two! My hands were shaking the entire time though.", "they approved the budget for phase two"),
               ("Mixed. They liked the idea but want a smaller pilot first, so I'm redoing the numbers.", "mixed: they want a smaller pilot first"),
               ("It went great, actually. The CFO asked for my slides afterwards.", "it went well; the CFO asked for the slides")]
PRES_ADV = [("Rehearse it out loud three times, recording yourself once, and open with the single number you most want them to remember.",
             "record yourself doing it once. horrible but it works", "rehearse out loud, record once, open with the key number"),
            ("Write down the three hardest questions they could ask and a one-line answer for each; confidence mostly comes from not being surprised.",
             "make a list of the worst questions they could ask and answer them in advance", "prepare answers to the hardest questions they could ask"),
            ("Cut it to ten slides, put the decision you need from them on the very first one, and keep the detail in an appendix.",
             "ten slides max and put the ask on slide one", "cut to ten slides with the decision needed on the first one")]


@arc("presentation", "work")
def arc_presentation(a):
    a.maxgap = 3
    proj = a.pick("proj", PROJECTS)
    res, adv = a.c(*PRES_RESULT), a.c(*PRES_ADV)

    def s0(t):
        ph, x = t.future(("onwd", "weekfrom", "ondate", "tendays"))
        f = t.say(t.c(f"I have to pitch the {proj} plan to the whole leadership team {ph} and I'm already losing sleep over it.",
                      f"They're making me present the {proj} roadmap to the executives {ph}. My stomach hurts just typing that."), dom="work")
        v = t.other(grp=[adv[1]], asst=adv[0], dom="work", mood="neu")
        t.q("single-hop", t.cq(f"What was {t.n} dreading at work?", f"What work task was making {t.n} anxious?", f"What was {t.n} losing sleep over at work?"), [f], f"presenting the {proj} plan to the leadership team")
        t.q("single-hop", f"How did {t.who(v)} suggest {t.n} get ready for {t.pos} big talk?", [v], adv[2])
        t.q("temporal", t.c(f"When was {t.n} due to speak in front of the bosses?", f"On what date was {t.n}'s pitch to senior management?"), [f], t.ans(x))
        t.dated(x, f"{t.n}'s talk to the executives", f)
        a.st["f"] = f

    def s1(t):
        t.ask(["so how did the big pitch go??", f"{t.n} did you survive the exec meeting"],
              "Last time you were preparing for the leadership presentation. How did it go?", dom="work")
        f = t.say(res[0])
        t.react("pos")
        t.q("single-hop", t.cq(f"What came of the thing {t.n} was nervous about at work?", f"How did the presentation {t.n} was worried about turn out?"), [f], res[1])
        t.q("multi-hop", f"What was {t.n} worried about presenting, and how did it go?", [a.st["f"], f], f"the {proj} plan to leadership; {res[1]}")
        t.q("open-domain", f"Is {t.n} trusted with important projects at work?", [a.st["f"]], f"Likely yes: {t.sub} presented the {proj} plan to the leadership team")
        t.tag("work", a.st["f"], f"presented the {proj} plan to leadership")
    return [s0, s1]


CONFLICT_FIX = [("Update on the {cw} thing: I talked to my manager and now we each present our own slides. Problem solved.",
                 "{n} talked to the manager; now each of them presents their own slides"),
                ("So I finally talked to {cw} directly. {cwsub} apologized and said {cwsub2} didn't realize. We're fine now.",
                 "{n} talked to {cw} directly; {cwsub2} apologized"),
                ("{cw} got moved to another team, so that solved itself, ha.", "{cw} was moved to another team")]


@arc("coworker", "work")
def arc_coworker(a):
    cw, cp = a.side()
    fix = a.c(*CONFLICT_FIX)

    def s0(t):
        f = t.say(t.c(f"{cw} keeps presenting my dashboards in standup like {cp['sub']} made them. I'm fuming.",
                      f"Is it petty to be furious that {cw} put {cp['pos']} name on the report I wrote?"), dom="work")
        v = t.other(grp=["document everything. like literally email a recap after each meeting", "screenshot your drafts with timestamps, trust me"],
                    asst="Before escalating, it may help to send a short, friendly recap after each meeting that names who built what; it creates a paper trail without sounding accusatory.",
                    dom="work", mood="neg")
        t.q("single-hop", t.cq(f"Who was claiming credit for {t.n}'s work?", f"Which colleague was passing off {t.n}'s output as {cp['pos']} own?", f"Who made {t.n} furious by taking credit for {t.pos} work?"), [f], cw)
        t.q("single-hop", f"What did {t.who(v)} tell {t.n} to do about the colleague problem?", [v],
            "send a recap after each meeting naming who built what" if t.asst else v.text)
        a.st["f"] = f

    def s1(t):
        f = t.say(fix[0].format(cw=cw, cwsub=cap(cp["sub"]), cwsub2=cp["sub"]))
        t.react("pos")
        ans = fix[1].format(n=t.n, cw=cw, cwsub2=cp["sub"])
        t.q("single-hop", t.cq(f"How did {t.n}'s situation with {cw} get resolved?", f"How was {t.n}'s problem with {cw} solved?"), [f], ans)
        t.q("multi-hop", f"What was the trouble between {t.n} and {cw}, and how did it end?", [a.st["f"], f], f"{cw} took credit for {t.n}'s work; {ans}")
    return [s0, s1]


CERTS = ["the PMP", "the CPA exam", "the AWS Solutions Architect exam", "the CCNA", "CFA Level I", "the Google Data Analytics certificate",
         "the Six Sigma Green Belt"]
CERT_RES = [("Passed! With a decent margin too.", "yes, {sub} passed"), ("Failed by four points. Retaking it in the spring, I'm not giving up.", "no, {sub} failed by four points and will retake it"),
            ("Passed, barely. I'll take barely.", "yes, barely")]


@arc("cert", "work")
def arc_cert(a):
    a.maxgap = 3
    cert = a.pick("cert", CERTS)
    h = a.c(5, 6, 8, 10)
    res = a.c(*CERT_RES)

    def s0(t):
        f = t.say(t.c(f"I signed up for {cert}. Studying about {h} hours a week, mostly flashcards on the train.",
                      f"New goal: {cert}. I'm doing {NUM[h] if h <= 10 else h} hours a week of prep, mostly on my commute."), dom="work")
        t.react("pos", "work")
        t.q("single-hop", t.cq(f"What credential is {t.n} preparing for?", f"Which professional qualification is {t.n} working toward?", f"What is {t.n} studying for?"), [f], cert)
        t.q("single-hop", f"How much time does {t.n} put into exam prep each week?" if "exam" not in f.text else f"How many hours of work does {t.n} put into it every week?", [f], f"{h} hours")
        t.tag("work", f, f"studying for {cert}")
        t.q("open-domain", f"Is {t.n} investing in {t.pos} professional development?", [f], f"Yes: {t.sub} is studying for {cert}, {h} hours a week")
        a.st["f"] = f

    def s1(t):
        ph, x = t.past(("yest", "dby", "onwd", "wdpart"))
        f = t.say(t.c(f"Took {cert} {ph}. No idea how it went, my brain is soup.", f"I sat {cert} {ph}. Four hours. I need a nap for a week."))
        t.react("neu")
        t.q("temporal", t.c(f"When did {t.n} sit for {t.pos} professional test?", f"On what day did {t.n} take {cert}?"), [f], t.ans(x))
        t.dated(x, f"{t.n} sitting {cert}", f)

    def s2(t):
        t.ask(["did you hear back about the exam??", f"{t.n} any news on the results"], "Did you get your exam results back yet?", dom="work")
        f = t.say(res[0])
        t.react("pos" if "Passed" in res[0] else "neg")
        t.q("single-hop", f"Did {t.n} get the qualification {t.sub} was studying for?", [f], res[1].format(sub=t.sub))
        t.q("multi-hop", f"What was {t.n} studying for, and how did it go?", [a.st["f"], f], f"{cert}; " + res[1].format(sub=t.sub))
    return [s0, s1, s2]


SHOP = [("hand-poured soy candles", "candles"), ("enamel pins of cats in tiny hats", "pins"), ("linocut greeting cards", "cards"),
        ("crocheted plant hangers", "plant hangers"), ("small-batch hot sauce", "hot sauce"), ("hand-bound notebooks", "notebooks")]
PLATFORMS = ["Etsy", "Shopify", "Big Cartel", "Instagram"]
PLACES_FAR = ["Anchorage", "Helsinki", "Auckland", "Reno", "Marseille", "Winnipeg", "Dundee", "Perth"]


@arc("shop", "hobby")
def arc_shop(a):
    a.echo = ["Packing orders at the kitchen table is my new Friday night."]
    item, short = a.pick("shop", SHOP)
    plat = a.c(*PLATFORMS)
    place = a.pick("far", PLACES_FAR)
    k = a.c(14, 22, 31, 40)

    def s0(t):
        f = t.say(t.c(f"I opened a little shop on {plat} selling {item}. Zero orders so far, ha.",
                      f"Soft launch: my {item} are live on {plat}! Please nobody look at the product photos too closely."), dom="hobby")
        t.react("pos", "hobby")
        t.q("single-hop", t.cq(f"What goods does {t.n} offer through {t.pos} side business?", f"What does {t.n} make and sell?", f"What is {t.n} selling on {plat}?"), [f], item)
        t.q("single-hop", t.cq(f"Which website does {t.n} use for {t.pos} side hustle?", f"Where is {t.n}'s little shop hosted?"), [f], plat)
        t.q("open-domain", f"Does {t.n} have a creative side?", [f], f"Yes, {t.sub} makes {item}")
        t.tag("hobby", f, f"runs a small shop selling {item}")
        a.st["f"] = f

    def s1(t):
        ph, x = t.past()
        f = t.say(t.c(f"FIRST ORDER came in {ph}! Someone in {place} bought two.", f"Somebody in {place} ordered {short} from me {ph}. A stranger! Paying money!"))
        t.react("pos")
        t.q("temporal", t.c(f"When did {t.n}'s little business get its very first customer?", f"When did a stranger first pay for something {t.n} made?"), [f], t.ans(x))
        t.q("single-hop", t.cq(f"Where did {t.n}'s earliest buyer live?", f"Where was {t.n}'s first order from?"), [f], place)
        t.dated(x, f"{t.n}'s first sale", f)
        a.st["f1"] = f

    def s2(t):
        f = t.say(t.c(f"Shop update: {k} orders last month. That covers my phone bill, which is a very specific kind of success.",
                      f"{k} orders in a month on the {short} shop! I had to buy a label printer."))
        t.react("pos")
        t.q("single-hop", f"What monthly sales figure did {t.n} report for {t.pos} side business?", [f], f"{k} orders in a month")
        t.q("multi-hop", f"How has {t.n}'s side business grown since it opened?", [a.st["f"], a.st["f1"], f], f"from zero orders to a first sale in {place} to {k} orders a month")
    return [s0, s1, s2]


# ---------------------------------------------------------------------------- health and food

ALLERGY = [
    dict(txt=["I can't eat anything with peanuts, I swell up like a balloon.", "Peanuts are a hard no for me, I carry an EpiPen everywhere."],
         ans="a peanut allergy", od=("Would chicken satay with dipping sauce be a safe order for {n}?", "No: satay sauce is usually made with peanuts")),
    dict(txt=["Shrimp, crab, lobster, anything like that and I end up in the ER.", "Heads up, I'm allergic to shellfish, like EpiPen allergic."],
         ans="a shellfish allergy", od=("Would a Louisiana crawfish boil be a good outing for {n}?", "No: crawfish are shellfish")),
    dict(txt=["Milk destroys my stomach, so no cheese, no ice cream, nothing like that.", "I'm lactose intolerant, so dairy is out for me."],
         ans="no dairy (lactose intolerance)", od=("Would {n} enjoy an evening at a Swiss fondue restaurant?", "Probably not: fondue is melted cheese and {sub} can't have dairy")),
    dict(txt=["Turns out I have celiac, so wheat, barley and rye are all off the menu now.", "My bloodwork came back: celiac. Goodbye gluten, goodbye pasta."],
         ans="celiac disease: no gluten", od=("Could {n} safely eat a regular bagel?", "No: bagels are made from wheat flour")),
    dict(txt=["Sesame gives me hives, and it's in everything. Hummus, burger buns, half of all sushi.", "I'm allergic to sesame seeds, which is a nightmare at bakeries."],
         ans="a sesame allergy", od=("Would tahini-heavy baba ganoush be a safe snack for {n}?", "No: tahini is sesame paste")),
]
DISLIKE = [("Cilantro tastes like soap to me. Always has.", "cilantro", ("Would {n} enjoy a salsa topped with lots of fresh coriander?", "No: coriander leaves are cilantro")),
           ("I can't stand olives. Green, black, stuffed, whatever.", "olives", ("Would {n} like a Provençal tapenade?", "No: tapenade is made from olives")),
           ("Mushrooms are a texture crime and I won't be taking questions.", "mushrooms", ("Would {n} order a portobello burger?", "Unlikely: a portobello is a mushroom")),
           ("Anything with coconut, no thank you. The smell alone.", "coconut", ("Would {n} enjoy a piña colada?", "Probably not: piña coladas are made with coconut cream")),
           ("Blue cheese is mold and I'm tired of pretending it isn't.", "blue cheese", ("Would {n} want a Roquefort dressing on the salad?", "No: Roquefort is a blue cheese"))]


@arc("allergy", "food")
def arc_allergy(a):
    al = a.pick("allergy", ALLERGY)
    dis = a.pick("dislike", DISLIKE)

    def s0(t):
        if t.asst:
            t.say(t.c("Can you help me plan a menu for six people on Saturday? Nothing fancy.", "I'm hosting a dinner for some coworkers next weekend. Menu ideas?"))
            t.ask(None, "Happy to help with the menu. Before I suggest anything: are there any ingredients you or your guests need to avoid?", dom="food")
        else:
            t.ask(["ok picking a restaurant for friday. anything anyone can't eat?", "booking the dinner place, any food stuff I should know about"], None)
        f = t.say(t.c(*al["txt"]))
        t.react("neu", "food")
        t.q("single-hop", t.cq(f"Does {t.n} have any dietary restrictions?", f"Is there anything {t.n} must avoid at meals?", f"What can't {t.n} have for medical reasons?",
                              f"What is {t.n} allergic to or unable to eat?"), [f], al["ans"])
        t.q("open-domain", al["od"][0].format(n=t.n), [f], al["od"][1].format(sub=t.sub))
        t.tag("food", f, al["ans"])
        t.tag("health", f, al["ans"])

    def s1(t):
        f = t.say(dis[0])
        t.react("neu", "food")
        t.q("single-hop", t.cq(f"Which ingredient does {t.n} hate?", f"What flavor does {t.n} refuse?", f"What food can't {t.n} stand?"), [f], dis[1])
        t.q("open-domain", dis[2][0].format(n=t.n), [f], dis[2][1])
        t.tag("food", f, f"dislikes {dis[1]}")
    return [s0, s1]


DIET = [dict(start=["I'm trying a month without meat, mostly for the climate thing.", "Going vegetarian starting Monday. The climate stuff finally got to me."],
             why="the climate", what="vegetarian",
             later=[("The no-meat month turned into four. I genuinely don't miss it.", "No, still vegetarian after four months",
                     ("Would a barbecue rib joint be a good pick for dinner with {n} now?", "No: {sub} is still vegetarian")),
                    ("Confession: I caved and had a burger. I'm eating chicken and fish again, just less red stuff.", "Yes, chicken and fish again, less red meat",
                     ("Could {n} order a grilled salmon these days?", "Yes: {sub} eats fish again"))]),
        dict(start=["My doctor wants my cholesterol down, so I'm cutting out red meat and cheese for now.", "Cholesterol came back high, so: no more steak, no more brie. Sad."],
             why="high cholesterol", what="cutting red meat and cheese",
             later=[("Numbers are down! Doctor says I can have steak on special occasions now.", "Steak only on special occasions",
                     ("Could {n} have a ribeye at a birthday dinner?", "Yes, on special occasions")),
                    ("Still off red meat. Honestly I feel better, so I'm keeping it that way.", "No, still off red meat",
                     ("Would a burger joint suit {n} these days?", "Not really: {sub} is still off red meat"))]),
        dict(start=["I started intermittent fasting, nothing before noon. My coworkers think I'm a monk.", "Trying this 16:8 fasting thing, no food until noon."],
             why="to try intermittent fasting", what="intermittent fasting",
             later=[("Gave up on the fasting, I was a monster by 11 every day. Breakfast is back.", "No longer fasting; breakfast is back",
                     ("Would {n} join a 9 am brunch these days?", "Yes: {sub} eats breakfast again")),
                    ("Three months of eating only between noon and eight and it's just normal now.", "Still fasting, eating between noon and eight",
                     ("Would {n} join a 9 am brunch and eat?", "Probably not: {sub} eats only between noon and eight"))])]


@arc("diet", "food")
def arc_diet(a):
    d = a.pick("diet", DIET)
    later = a.c(*d["later"])

    def s0(t):
        f = t.say(t.c(*d["start"]), dom="food")
        t.react("neu", "food")
        t.q("single-hop", t.cq(f"Why did {t.n} change how {t.sub} eats?", f"What prompted {t.n}'s new eating plan?"), [f], d["why"])
        t.q("single-hop", f"What eating experiment did {t.n} start?", [f], d["what"])
        a.st["f"] = f

    def s1(t):
        f = t.say(later[0])
        t.react("neu")
        qn = {"vegetarian": f"Does {t.n} eat animals these days?", "cutting red meat and cheese": f"Is beef back on {t.n}'s plate?",
              "intermittent fasting": f"Does {t.n} still skip the morning meal?"}[d["what"]]
        t.q("single-hop", qn, [f], later[1])
        t.q("multi-hop", f"How have {t.n}'s eating habits changed over the months?", [a.st["f"], f], f"started {d['what']}; then: {later[1]}")
        t.q("open-domain", later[2][0].format(n=t.n), [f], later[2][1].format(sub=t.sub))
        t.tag("food", f, later[1])
    return [s0, s1]


SLEEP_ADV = [("The most reliable fix is usually a fixed wake-up time, seven days a week, even after a bad night; it anchors your body clock.",
              "same wake-up time every single day, even weekends. boring but it works", "a fixed wake-up time every day"),
             ("If you're awake for more than twenty minutes, get out of bed and read something dull under a dim lamp until you feel drowsy.",
              "get up and read something boring, don't just lie there", "get up and read something dull if awake for twenty minutes"),
             ("Cut caffeine after noon and keep the bedroom cool, around 18 degrees; both make waking in the small hours less likely.",
              "no coffee after lunch and keep your room cold", "no caffeine after noon and a cool bedroom")]
SLEEP_RES = [("Way better. I slept through five nights this week.", "yes: five full nights that week"),
             ("Still bad, honestly. I'm seeing my doctor about it next month.", "no, still bad; seeing a doctor"),
             ("A bit better. I still wake up but I fall back asleep within half an hour now.", "somewhat: falls back asleep within half an hour")]


@arc("sleep", "health")
def arc_sleep(a):
    a.maxgap = 4
    adv, res = a.c(*SLEEP_ADV), a.c(*SLEEP_RES)

    def s0(t):
        f = t.say(t.c("I keep waking up at 3 am and lying there until 5. It's been two weeks of this.",
                      "My brain switches on at about three in the morning every night and won't shut up."), dom="health")
        v = t.other(grp=[adv[1]], asst=adv[0], dom="health", mood="neg")
        t.q("single-hop", t.cq(f"What was disturbing {t.n}'s rest?", f"What nighttime problem did {t.n} describe?", f"At what time does {t.n} keep waking up at night?"), [f], "waking at 3 am and not falling back asleep")
        t.q("single-hop", f"What did {t.who(v)} recommend for {t.n}'s insomnia?", [v], adv[2])
        t.tag("health", f, "waking up at 3 am")
        a.st["f"], a.st["v"] = f, v

    def s1(t):
        t.ask(["how's the 3am thing?", f"{t.n} are you sleeping yet"], "How has your sleep been since we last talked?", dom="health")
        f = t.say(res[0])
        t.react("pos" if "better" in res[0] else "neg")
        t.q("single-hop", t.cq(f"Did {t.n}'s nights improve?", f"Is {t.n} resting better lately?"), [f], res[1])
        t.q("multi-hop", f"What was {t.n} told to try for {t.pos} night waking, and did it help?", [a.st["v"], f], f"{adv[2]}; {res[1]}")
    return [s0, s1]


ISSUES = [dict(name="plantar fasciitis", body="heel", qpart="foot", remedy="rolling a frozen water bottle under my arch every night",
               ans_rem="rolling a frozen water bottle under the arch", od=("Would a barefoot run on hard sand be a good idea for {n} right now?", "No: {sub} has plantar fasciitis in {pos} heel")),
          dict(name="tennis elbow", body="elbow", qpart="arm", remedy="a forearm strap and lifting the kettle with my other hand",
               ans_rem="a forearm strap and using the other hand", od=("Should {n} spend the weekend hammering fence posts?", "Probably not: tennis elbow gets worse with gripping and hammering")),
          dict(name="a pinched nerve", body="neck", qpart="spine", remedy="raising my monitor to eye level and doing chin tucks every hour",
               ans_rem="raising the monitor and doing chin tucks", od=("Would a long session on a low laptop on the couch be good for {n}?", "No: looking down aggravates {pos} pinched nerve")),
          dict(name="carpal tunnel", body="wrist", qpart="hand", remedy="a vertical mouse and a splint at night",
               ans_rem="a vertical mouse and a night splint", od=("Would a weekend of knitting be comfortable for {n} at the moment?", "Probably not: repetitive wrist movement aggravates carpal tunnel"))]


@arc("body", "health")
def arc_body(a):
    a.maxgap = 5
    iss = a.pick("issue", ISSUES)

    def s0(t):
        ph, x = t.past(("yest", "onwd", "lastwd", "ndays"))
        f = t.say(t.c(f"My {iss['body']} has been killing me for weeks, and {ph} the doctor finally said it's {iss['name']}.",
                      f"Saw someone about my {iss['body']} {ph}. Verdict: {iss['name']}."), dom="health")
        t.react("neg", "health")
        t.q("single-hop", t.cq(f"What {iss['qpart']} problem was {t.n} diagnosed with?", f"What did the doctor say was wrong with {t.n}'s {iss['body']}?"), [f], iss["name"].replace("my ", ""))
        t.q("temporal", f"When did {t.n} find out what was wrong with {t.pos} {iss['qpart']}?", [f], t.ans(x))
        t.dated(x, f"{t.n}'s diagnosis", f)
        t.tag("health", f, iss["name"].replace("my ", ""))
        a.st["f"] = f

    def s1(t):
        t.ask([f"how's the {iss['body']}?", f"{t.n} is the {iss['body']} any better"], f"How is your {iss['body']} doing?", dom="health", p=0.5)
        f = t.say(t.c(f"The thing that helped the {iss['body']} most: {iss['remedy']}.", f"Good news on the {iss['body']}: {iss['remedy']} did the trick."))
        t.react("pos", "health")
        t.q("single-hop", f"What eased {t.n}'s {iss['qpart']} pain?", [f], iss["ans_rem"])
        t.q("multi-hop", f"What was wrong with {t.n}'s {iss['qpart']}, and what made it better?", [a.st["f"], f], f"{iss['name'].replace('my ', '')}; {iss['ans_rem']}")
        t.q("open-domain", iss["od"][0].format(n=t.n), [a.st["f"]], iss["od"][1].format(sub=t.sub, pos=t.pos))
    return [s0, s1]


DENTAL = [("getting my wisdom teeth pulled", "wisdom teeth removal"), ("a root canal on a back molar", "a root canal"),
          ("getting a crown on the tooth I cracked on a popcorn kernel", "a crown on a cracked tooth")]
DENTAL_RES = [("Swollen like a chipmunk, but it barely hurts. Living on applesauce.", "swollen but barely painful; eating applesauce"),
              ("Dry socket on the left side, which is as fun as it sounds. Back to the dentist tomorrow.", "badly: a dry socket, back to the dentist"),
              ("Totally fine! I was eating toast the next day.", "fine; eating toast the next day")]


@arc("dental", "health")
def arc_dental(a):
    a.maxgap = 2
    proc, short = a.pick("dental", DENTAL)
    res = a.c(*DENTAL_RES[:2]) if "teeth" in proc else a.c(DENTAL_RES[0], DENTAL_RES[2])

    def s0(t):
        ph, x = t.future(("tom", "onwd", "ondate", "weekfrom"))
        f = t.say(t.c(f"I'm {proc} {ph}. Stocking up on smoothies and pudding.", f"Dentist appointment {ph}: {proc}. Pray for me."), dom="health")
        t.react("neg", "health")
        t.q("temporal", t.c(f"When was {t.n}'s oral surgery?", f"On what date was {t.n}'s procedure in the dental chair?"), [f], t.ans(x))
        t.q("single-hop", t.cq(f"What treatment was {t.n} about to have on {t.pos} mouth?", f"What was {t.n} getting done at the dentist?"), [f], short)
        t.dated(x, f"{t.n}'s dental procedure", f)
        t.tag("health", f, short)

    def s1(t):
        t.ask(["how's the mouth??", f"{t.n} how are the teeth"], "How are you recovering from the dental work?", dom="health")
        f = t.say(res[0])
        t.react("neu")
        t.q("single-hop", f"How was {t.n} healing after the procedure?", [f], res[1])
    return [s0, s1]


WORKOUT = [("I joined the bouldering gym by my office. My forearms are jelly.", "bouldering", "climbing"),
           ("I signed up for a 6 am rowing class at the Y. Who am I?", "a rowing class", "rowing"),
           ("Started going to a spin studio three mornings a week.", "spin classes", "spin"),
           ("I've been swimming laps at the public pool before work.", "lap swimming", "swimming")]
WORKOUT_LATER = [("Let my {x} membership lapse, the drive was killing me. Now it's a twenty-minute kettlebell routine in my living room.", "a kettlebell routine at home", "the drive"),
                 ("I stopped the {x}, my schedule changed. I walk to work now, forty minutes each way.", "walking to work", "a schedule change"),
                 ("Quit {x} after my shoulder started clicking. I do yoga videos in the mornings now.", "yoga videos at home", "{pos} shoulder started clicking")]


@arc("workout", "health")
def arc_workout(a):
    a.echo = ["My legs are sore from this morning's workout. Stairs are my enemy."]
    w = a.pick("workout", WORKOUT)
    later = a.c(*WORKOUT_LATER)

    def s0(t):
        f = t.say(w[0], dom="health")
        t.react("pos", "health")
        t.q("single-hop", t.cq(f"What kind of exercise did {t.n} first take up?", f"Which fitness activity did {t.n} originally sign up for?", f"What did {t.n} start going to before work or after?"), [f], w[1])
        a.st["f"] = f

    def s1(t):
        f = t.say(later[0].format(x=w[2]))
        t.react("neu", "health")
        t.q("single-hop", t.cq(f"How does {t.n} stay in shape these days?", f"What is {t.n}'s current way of keeping fit?"), [f], later[1])
        t.q("single-hop", f"Why did {t.n} drop {t.pos} earlier fitness routine?", [f], later[2].format(pos=t.pos))
        t.q("multi-hop", f"How has {t.n}'s exercise routine changed?", [a.st["f"], f], f"{w[1]} first, now {later[1]}")
    return [s0, s1]


# ---------------------------------------------------------------------------- money

BUDGET_APPS = ["YNAB", "Monarch", "Goodbudget", "a color-coded Google Sheet", "Copilot", "PocketGuard", "Actual Budget"]
BUDGET_WHY = [("the bank sync kept breaking", "the bank sync kept breaking"), ("it wanted $14 a month for basic features", "the subscription price"),
              ("I kept forgetting to open it", "{sub} kept forgetting to open it")]
BUDGET_ADV = [("A simple starting point is the 50/30/20 split: half of take-home pay for needs, thirty percent for wants and twenty for savings and debt.",
               "the 50/30/20 split of take-home pay"),
              ("Zero-based budgeting might suit you: at the start of each month you give every dollar a job until nothing is left unassigned.",
               "zero-based budgeting, giving every dollar a job"),
              ("Try the envelope method digitally: a fixed amount per category each month, and when an envelope is empty, that category is done.",
               "the envelope method with a fixed amount per category")]


@arc("budget", "money")
def arc_budget(a):
    a.echo = ["Month three of logging every single expense. I know exactly how much I spend on oat milk now, and I hate it."]
    a1 = a.pick("bapp", BUDGET_APPS)
    a2 = a.pick("bapp", BUDGET_APPS)
    why = a.c(*BUDGET_WHY)
    adv = a.c(*BUDGET_ADV)

    def s0(t):
        f = t.say(t.c(f"New plan: I'm logging every purchase in {a1}. Even coffees.", f"I've started putting every single purchase into {a1}. It's humbling."), dom="money")
        v = t.other(grp=["do the envelope thing, cash in envelopes, my mom swears by it", "just look at your bank statement every sunday, that's all I do"],
                    asst=adv[0], dom="money", mood="pos")
        t.q("single-hop", t.cq(f"Which tool did {t.n} first use to track spending?", f"What did {t.n} originally use to keep tabs on where the money goes?",
                              f"Which app did {t.n} start logging every purchase in?"), [f], a1)
        t.q("single-hop", f"What approach to money management did {t.who(v)} describe to {t.n}?", [v], adv[1] if t.asst else v.text)
        t.tag("tools", f, a1)
        a.st["f"] = f

    def s1(t):
        f = t.say(f"I gave up on {a1}, {why[0]}. Moved everything over to {a2}.")
        t.react("neu", "money")
        t.q("single-hop", t.cq(f"What does {t.n} use now to follow {t.pos} expenses?", f"Which app does {t.n} currently rely on for personal finances?"), [f], a2)
        t.q("single-hop", t.cq(f"Why did {t.n} abandon the first tool?", f"Why did {t.n} give up on {a1}?"), [f], why[1].format(sub=t.sub))
        t.q("multi-hop", f"Which tools has {t.n} used for tracking spending, in order?", [a.st["f"], f], f"{a1}, then {a2}")
        t.tag("tools", f, a2)
    return [s0, s1]


SAVE_SOLD = ["my old motorcycle", "a drum kit I never played", "my grandmother's sewing machine", "a pile of vintage comics", "my second monitor and the gaming chair"]


@arc("savings", "money")
def arc_savings(a):
    a.echo = ["Skipped takeout all week for the house fund. Rice and beans, rice and beans.", "Spent my lunch break looking at listings I can't afford yet."]
    goal = a.c(30000, 40000, 45000, 60000)
    a1 = a.c(6000, 8500, 11000, 12500)
    a2 = a1 + a.c(5500, 7000, 9000)
    sold = a.pick("sold", SAVE_SOLD)
    street = a.pick("street", ["Larch Street", "Osprey Lane", "Kittredge Avenue", "Marlowe Road", "Fenwick Court"])

    def s0(t):
        f = t.say(t.c(f"We're saving for a down payment. Goal is {money(goal)} by next summer and we have {money(a1)} so far.",
                      f"House fund: {money(a1)} out of {money(goal)}. Long way to go, but it's a start."), dom="money")
        t.react("pos", "money")
        t.q("single-hop", t.cq(f"How much had {t.n} put aside toward a home at first?", f"How much had {t.n} saved for the down payment at first?"), [f], money(a1))
        t.q("single-hop", t.cq(f"What is {t.n}'s target for buying property?", f"What is {t.n}'s savings goal for the down payment?"), [f], money(goal))
        t.tag("money", f, f"saving for a down payment, {money(a1)} of {money(goal)}")
        a.st["f"] = f

    def s1(t):
        t.ask(["how's the house fund going?", "how close are you to the down payment"], "How is the saving for the house going?", dom="money", p=0.4)
        f = t.say(t.c(f"Savings update: {money(a2)}! Selling {sold} helped a lot.", f"We're at {money(a2)} now. I sold {sold}, which hurt a little."))
        t.react("pos", "money")
        t.q("single-hop", t.cq(f"How much has {t.n} set aside most recently?", f"What is the latest savings figure {t.n} shared?"), [f], money(a2))
        t.q("single-hop", t.cq(f"What did {t.n} part with to add cash to the pot?", f"What did {t.n} sell to help the savings?"), [f], sold.replace("my ", f"{t.pos} "))
        t.q("multi-hop", f"How much did {t.n}'s nest egg grow between the two updates?", [a.st["f"], f], f"{money(a2 - a1)} ({money(a1)} to {money(a2)})")
        a.st["f1"] = f

    def s2(t):
        f = t.say(t.c(f"We made an offer on a two-bedroom on {street}! Fingers crossed.", f"Put in an offer on a little place on {street}. I feel sick."))
        t.react("pos")
        t.q("single-hop", f"Where is the place {t.n} bid on?", [f], street)
        t.q("multi-hop", f"How did {t.n} go from saving to bidding on a home?", [a.st["f"], a.st["f1"], f], f"{money(a1)} saved, then {money(a2)}, then an offer on {street}")
        t.q("open-domain", f"Is {t.n} likely to be renting for much longer?", [f, a.st["f"]], "Probably not: {sub} has saved for a down payment and made an offer".format(sub=t.sub))
    return [s0, s1, s2]


@arc("debt", "money")
def arc_debt(a):
    amt = a.c(4200, 6800, 9300, 11750)
    months = a.c(11, 14, 18, 22)

    def s0(t):
        ph, x = t.past()
        f = t.say(t.c(f"Made my last credit card payment {ph}. {money(amt)} gone in {months} months.",
                      f"{cap(ph)} I paid off the card. All {money(amt)} of it. {months} months of ramen."), dom="money")
        t.react("pos", "money")
        t.q("temporal", t.c(f"When did {t.n} clear {t.pos} balance?", f"When did {t.n} become free of {t.pos} revolving debt?"), [f], t.ans(x))
        t.q("single-hop", t.cq(f"How big was the balance {t.n} wiped out?", f"How much credit card debt did {t.n} pay off?"), [f], money(amt))
        t.q("open-domain", f"Is {t.n} disciplined about finances?", [f], f"Yes: {t.sub} paid off {money(amt)} in {months} months")
        t.dated(x, f"{t.n} paying off the card", f)
        t.tag("money", f, f"paid off {money(amt)} of card debt")
    return [s0]


@arc("hail", "money")
def arc_hail(a):
    a.maxgap = 4
    amt = a.c(1850, 2400, 3100)
    ded = a.c(500, 1000)

    def s0(t):
        ph, x = t.past(("yest", "onwd", "wdpart", "dby"))
        f = t.say(t.c(f"A hailstorm dented the hood of my car {ph}. Golf balls falling from the sky.", f"{cap(ph)} hail the size of marbles hammered my hood. It looks like a golf ball now."), dom="money")
        t.react("neg")
        t.q("temporal", t.c(f"When did the storm damage {t.n}'s vehicle?", f"When was {t.n}'s car hit by the weather?"), [f], t.ans(x))
        t.dated(x, f"the storm that damaged {t.n}'s car", f)
        a.st["f"] = f

    def s1(t):
        t.ask(["did insurance ever pay for the hail thing?", "any news on the dented car"], "Did the insurance claim for the hail damage go through?", dom="money", p=0.5)
        f = t.say(t.c(f"Insurance finally paid out {money(amt)} for the hood, minus my {money(ded)} deductible.", f"The claim went through: {money(amt)}, less the {money(ded)} deductible."))
        t.react("pos", "money")
        t.q("single-hop", t.cq(f"How much did {t.n} get back for the weather damage?", f"How much did the insurance pay {t.n} for the hood?"), [f], f"{money(amt)} minus a {money(ded)} deductible")
        t.q("multi-hop", f"What happened to {t.n}'s car and how was it covered?", [a.st["f"], f], f"hail dented the hood; insurance paid {money(amt)} minus the deductible")
        t.q("open-domain", f"Did {t.n} have to pay anything out of pocket for the dented hood?", [f], f"Yes: the {money(ded)} deductible")
        t.tag("money", f, f"insurance payout of {money(amt)}")
    return [s0, s1]


@arc("rent", "money")
def arc_rent(a):
    a.echo = ["Still no fix for the moldy bathroom, by the way. Classic."]
    r1 = a.c(250, 300, 350, 400)
    r2 = r1 - a.c(100, 150)
    term = a.c("two years", "eighteen months")

    def s0(t):
        f = t.say(t.c(f"My landlord wants to raise the rent by {money(r1)} a month when the lease renews. For the same moldy bathroom.",
                      f"Lease renewal letter came: plus {money(r1)} a month. I laughed, then I cried."), dom="money")
        v = t.other(grp=[f"offer to sign for {term}, they usually take it", "ask for a longer lease in exchange for a smaller bump"],
                    asst=f"Landlords often prefer a reliable tenant to an empty unit, so it's reasonable to offer a longer lease, say {term}, in exchange for a smaller increase.",
                    dom="money", mood="neg")
        t.q("single-hop", t.cq(f"How much more per month was {t.n} first asked to pay for housing?", f"By how much did {t.n}'s landlord first want to raise the rent?"), [f], money(r1))
        t.q("single-hop", f"What bargaining tactic did {t.who(v)} suggest to {t.n} for the renewal?", [v], f"offer a longer lease in exchange for a smaller increase")
        a.st["f"] = f

    def s1(t):
        f = t.say(t.c(f"Negotiated the rent increase down to {money(r2)} by signing for {term}!", f"Landlord update: the increase is {money(r2)} now, not {money(r1)}, because I signed for {term}."))
        t.react("pos", "money")
        t.q("single-hop", t.cq(f"What did {t.n} agree to in exchange for a smaller hike?", f"How did {t.n} negotiate the increase down?"), [f], f"signing for {term}")
        t.q("single-hop", f"In the end, how much did {t.n}'s monthly housing cost go up?", [f], money(r2))
        t.q("multi-hop", f"By how much did {t.n} talk down the landlord's increase?", [a.st["f"], f], f"{money(r1 - r2)} a month ({money(r1)} to {money(r2)})")
        t.q("open-domain", f"Is {t.n} likely to move out this year?", [f], f"Unlikely: {t.sub} signed for {term}")
    return [s0, s1]


# ---------------------------------------------------------------------------- home

HEATER_FIX = [("a tankless unit", "a tankless water heater"), ("a heat pump water heater", "a heat pump water heater"), ("a new 50-gallon tank", "a new 50-gallon tank")]


@arc("heater", "home")
def arc_heater(a):
    a.maxgap = 2
    pl, pp = a.side()
    fix = a.c(*HEATER_FIX)
    cost = a.c(1900, 2600, 3400, 4100)
    a.echo = ["Hot showers. I will never take them for granted again.", "The basement still smells a bit damp, I'm running a fan down there."]

    def s0(t):
        ph, x = t.past(("yest", "dby", "onwd"))
        ph = ph[3:] if ph.startswith("on ") else ph
        f = t.say(t.c(f"No hot water since {ph}. The heater in the basement is leaking from the bottom.",
                      f"Cold showers since {ph}. There's a puddle under the water heater and it's making a ticking noise."), dom="home")
        t.other(grp=["oh no, cold showers in this weather??", "nooo. come shower at mine"],
                asst="Leaking from the bottom of the tank usually means internal corrosion, which can't really be patched. Shut off the cold water supply and the power or gas to the heater, and call a plumber for an assessment.",
                dom="home", mood="neg")
        t.q("temporal", t.c(f"Since when was {t.n} stuck without warm showers?", f"When did {t.n} lose heated water at home?"), [f], t.ans(x))
        t.dated(x, f"{t.n}'s water heater breaking", f)
        a.st["f"] = f

    def s1(t):
        t.ask(["do you have hot water yet?", "did the plumber come?"], "Did you manage to get a plumber to look at the water heater?", dom="home", p=0.5)
        f = t.say(t.c(f"The plumber, {pl}, says the tank is rusted through. We're replacing it with {fix[0]}, {money(cost)} installed.",
                      f"{pl} came by to look at it: rusted through, not fixable. Going with {fix[0]}. {money(cost)} with installation, ouch."), dom="home")
        t.react("neg", "home")
        t.q("single-hop", t.cq(f"What is replacing {t.n}'s broken appliance in the basement?", f"What kind of water heater is {t.n} getting?"), [f], fix[1])
        t.q("single-hop", t.cq(f"Who did {t.n} bring in to look at the leak?", f"Which tradesperson did {t.n} call?"), [f], pl)
        t.q("single-hop", f"How much is {t.n} paying for the replacement?", [f], money(cost))
        t.q("multi-hop", f"What went wrong in {t.n}'s basement, and what is the fix?", [a.st["f"], f], f"the water heater leaked; replacing it with {fix[1]}")
        t.tag("home", f, f"replaced the water heater with {fix[1]}")
    return [s0, s1]


ROOMS = ["nursery", "home office", "bedroom", "kitchen", "hallway", "guest room"]
COLORS = ["sage green", "pale terracotta", "navy blue", "buttery yellow", "charcoal gray", "dusty pink", "warm white", "deep teal"]
PAINT_WHY = [("it looked like a hospital once it was on the wall", "it looked like a hospital on the wall"),
             ("it went weirdly purple in the evening light", "it looked purple in the evening light"),
             ("it made the room feel like a cave", "it made the room feel like a cave")]


@arc("paint", "home")
def arc_paint(a):
    a.echo = ["There's still paint on my elbow from the weekend, somehow."]
    room = a.c(*ROOMS)
    c1, c2 = a.pick("color", COLORS), a.pick("color", COLORS)
    why = a.c(*PAINT_WHY)

    def s0(t):
        f = t.say(t.c(f"Picked the paint for the {room}: {c1}. Taping everything off this weekend.", f"Decision made, the {room} is going {c1}."), dom="home")
        t.react("pos", "home")
        t.q("single-hop", t.cq(f"What shade did {t.n} originally choose for the {room}?", f"What paint color did {t.n} first pick for the {room}?"), [f], c1)
        a.st["f"] = f

    def s1(t):
        f = t.say(t.c(f"Scrapped the {c1} in the {room}, {why[0]}. Went with {c2} instead.", f"Repainted the {room}. The {c1} was a mistake, {why[0]}. It's {c2} now and I love it."))
        t.react("neu", "home")
        t.q("single-hop", t.cq(f"What hue did {t.n}'s {room} end up?", f"Which tint is on the walls of {t.n}'s {room} now?"), [f], c2)
        t.q("single-hop", f"Why did {t.n} change {t.pos} mind about the first shade?", [f], why[1])
        t.q("multi-hop", f"Which colors has {t.n}'s {room} been, in order?", [a.st["f"], f], f"{c1}, then {c2}")
        t.tag("home", f, f"repainted the {room} {c2}")
    return [s0, s1]


ROOFERS = ["Ridgeline Roofing", "Pell & Sons", "Summit Exteriors", "Greyslate Roofing", "Blackbird Contracting"]


@arc("roof", "home")
def arc_roof(a):
    a.maxgap = 4
    co = a.pick("roofer", ROOFERS)
    price = a.c(6800, 9400, 12500, 14200)

    def s0(t):
        f = t.say(t.c("There's a brown stain spreading on the ceiling above my bed. Pretty sure the roof is leaking.",
                      "Water is dripping into a bucket in the upstairs closet every time it rains. Great times."), dom="home")
        t.other(grp=["get it looked at before winter", "ugh roofs are the worst"],
                asst="A stain that keeps growing usually means an active leak. In the meantime, photograph it with a date, put a bucket or tarp where needed, and get a roofer to inspect the flashing and shingles above that spot.",
                dom="home", mood="neg")
        t.q("single-hop", t.cq(f"What made {t.n} suspect a problem overhead?", f"What was the first sign of trouble above {t.n}'s head at home?"), [f],
            "a brown stain spreading on the ceiling" if "stain" in f.text else "water dripping into a bucket when it rains")
        a.st["f"] = f

    def s1(t):
        ph, x = t.future(("onwd", "ondate", "weekfrom"))
        f = t.say(t.c(f"Got three quotes for the roof. Going with {co}, {money(price)}, and they start {ph}.", f"Hired {co} for the roof: {money(price)}. They begin {ph}."), dom="home")
        t.react("neu", "home")
        t.q("single-hop", t.cq(f"Which company did {t.n} choose for the repair overhead?", f"Which roofing company did {t.n} hire?"), [f], co)
        t.q("temporal", f"When were the workers due to begin on {t.n}'s house?", [f], t.ans(x))
        t.q("multi-hop", f"What problem did {t.n} have upstairs, and who is fixing it?", [a.st["f"], f], f"a roof leak; {co}")
        t.dated(x, f"the start of work on {t.n}'s roof", f)
        t.tag("home", f, f"roof repair by {co}")
    return [s0, s1]


FURNITURE = [("Built a standing desk from a flat-pack kit. Four hours, one screw left over, it wobbles slightly.", "a standing desk"),
             ("Assembled a bunk bed for when my nephews visit. The instructions were just pictures of a sad cartoon man.", "a bunk bed"),
             ("Put together a six-drawer dresser by myself. Only cried once.", "a six-drawer dresser"),
             ("I built a bookshelf that covers the whole living room wall, floor to ceiling.", "a floor-to-ceiling bookshelf")]


@arc("furniture", "home")
def arc_furniture(a):
    fu = a.pick("furn", FURNITURE)

    def s0(t):
        ph, x = t.past(("yest", "onwd", "wdpart"))
        f = t.say(f"{cap(ph)} I did a thing. {fu[0]}")
        t.react("pos", "home")
        t.q("single-hop", t.cq(f"What piece of furniture did {t.n} put together?", f"What did {t.n} build or assemble at home?"), [f], fu[1])
        t.q("temporal", f"When did {t.n} do {t.pos} flat-pack project?" if "flat-pack" not in f.text else f"On what day did {t.n} do {t.pos} assembly project?", [f], t.ans(x))
        t.dated(x, f"{t.n} assembling {fu[1]}", f)
        t.tag("home", f, f"built {fu[1]}")
    return [s0]


@arc("yard", "home")
def arc_yard(a):
    what = a.c(("clover and native wildflowers", "clover and native wildflowers"), ("a gravel garden with lavender", "gravel and lavender"), ("raised vegetable beds", "raised vegetable beds"))

    def s0(t):
        f = t.say(f"Tore out the front lawn and put in {what[0]}. No more mowing!", dom="home")
        t.react("pos", "home")
        t.q("single-hop", t.cq(f"What did {t.n} replace the grass with?", f"What did {t.n} put in instead of the front lawn?"), [f], what[1])
        t.q("open-domain", f"Does {t.n} still need a lawnmower for the front of the house?", [f], "Probably not: the lawn is gone")
        t.tag("home", f, f"replaced the lawn with {what[1]}")
    return [s0]


# ---------------------------------------------------------------------------- hobbies

HOBBIES = [
    dict(h="astronomy", gear="an 8-inch Dobsonian telescope", gtxt="The box is bigger than my couch.",
         res="finally saw Saturn's rings", q_res="What did {n} manage to spot in the night sky?", a_res="Saturn's rings",
         q_gear="What did {n} purchase to get into astronomy?"),
    dict(h="birding", gear="a pair of 10x42 binoculars", gtxt="I'm officially a person who wears a vest with pockets.",
         res="saw a pileated woodpecker at the reservoir", q_res="Which bird did {n} spot at the reservoir?", a_res="a pileated woodpecker",
         q_gear="What optical gear did {n} get for watching wildlife?"),
    dict(h="3D printing", gear="a Prusa printer", gtxt="It hums all night like a tiny factory.",
         res="printed a replacement knob for the dishwasher and it actually fits", q_res="What useful household part did {n} produce with {pos} new machine?",
         a_res="a replacement dishwasher knob", q_gear="What gadget did {n} get for making plastic objects at home?"),
    dict(h="beekeeping", gear="two beehives and a very unflattering suit", gtxt="The neighbors have questions.",
         res="harvested eleven jars of honey", q_res="How much did {n}'s first harvest from the hives yield?", a_res="eleven jars of honey",
         q_gear="What did {n} set up in {pos} yard for a new pastime?"),
    dict(h="homebrewing", gear="a five-gallon fermenter kit", gtxt="The kitchen smells like a bakery exploded.",
         res="bottled my first batch of oatmeal stout", q_res="What style of beer did {n} make?", a_res="an oatmeal stout",
         q_gear="What equipment did {n} buy for brewing?"),
    dict(h="quilting", gear="a secondhand Bernina sewing machine", gtxt="It weighs as much as a small dog.",
         res="finished a baby quilt for my cousin", q_res="Who was {n}'s first finished quilt for?", a_res="{pos} cousin's baby",
         q_gear="What machine did {n} acquire for {pos} fabric projects?"),
    dict(h="fly fishing", gear="a nine-foot fly rod", gtxt="I have practiced casting on the lawn like a lunatic.",
         res="caught a brown trout on the upper river", q_res="What did {n} land on the upper river?", a_res="a brown trout",
         q_gear="What angling equipment did {n} pick up?"),
    dict(h="calligraphy", gear="a set of pointed nibs and walnut ink", gtxt="My hands are permanently brown now.",
         res="lettered the place cards for a friend's wedding", q_res="What did {n} hand-letter for a friend?", a_res="the place cards for a friend's wedding",
         q_gear="What supplies did {n} buy for fancy handwriting?"),
    dict(h="chess", gear="a wooden tournament board and a clock", gtxt="I play against myself at breakfast.",
         res="won my first rated game at the club", q_res="What milestone did {n} reach at {pos} club?", a_res="{pos} first rated win",
         q_gear="What did {n} buy to practice {pos} board game?"),
]


@arc("hobby", "hobby", 1.5)
def arc_hobby(a):
    a.echo = ["Spent the whole evening on my new hobby again. No regrets.", "I watched beginner videos until 1 am. Send help."]
    h = a.pick("hobby", HOBBIES)

    def s0(t):
        f = t.say(f"I caved and bought {h['gear']}. {h['gtxt']}", dom="hobby")
        t.other(grp=["what are you even going to do with that", "ok new hobby era"],
                asst="That's a lovely thing to get into. The first few weeks are mostly learning the equipment, so go easy on yourself.", dom="hobby", mood="pos")
        t.q("single-hop", t.cq(h["q_gear"].format(n=t.n, pos=t.pos), f"What did {t.n} cave and buy?"), [f], h["gear"])
        t.tag("hobby", f, h["h"])
        a.st["f"] = f

    def s1(t):
        ph, x = t.past(("yest", "onwd", "wdpart", "dby", "lastwd"))
        t.ask([f"how's the new {h['h']} thing going", f"{t.n} any {h['h']} news"], f"How is the {h['h']} going?", dom="hobby", p=0.4)
        f = t.say(t.c(f"Big moment {ph}: I {h['res']}!", f"{cap(ph)} I {h['res']}. I'm unbearable about it, sorry."))
        t.react("pos", "hobby")
        t.q("single-hop", h["q_res"].format(n=t.n, pos=t.pos), [f], h["a_res"].format(pos=t.pos))
        t.q("temporal", f"When did {t.n} have {t.pos} first big success with {h['h']}?", [f], t.ans(x))
        t.q("multi-hop", f"What did {t.n} buy for {t.pos} new pastime, and what has {t.sub} achieved with it?", [a.st["f"], f], f"{h['gear']}; {h['a_res'].format(pos=t.pos)}")
        t.q("open-domain", f"Would a gift related to {h['h']} suit {t.n}?", [a.st["f"], f], f"Yes, {t.sub} took up {h['h']}")
        t.dated(x, f"{t.n}'s first {h['h']} success", f)
    return [s0, s1]


COURSES = [dict(txt="Signed up for an ASL class at the community college, Monday nights.", what="American Sign Language", day="Monday",
                later="Had a whole conversation with my teacher about the weather, with my hands! Nobody said a word out loud.",
                q_later="What did {n} manage to do in {pos} evening course?", a_later="hold a whole conversation in sign language about the weather",
                od=("Could {n} chat a little with a deaf person who signs?", "Likely yes, at a basic level: {sub} is learning American Sign Language")),
           dict(txt="I'm taking a welding class on Thursdays. I have a helmet and everything.", what="welding", day="Thursday",
                later="I made a little metal side table in class. It's crooked but it holds a lamp.",
                q_later="What did {n} produce in {pos} evening course?", a_later="a small metal side table",
                od=("Could {n} fix a broken metal gate hinge?", "Possibly: {sub} is taking a welding class")),
           dict(txt="Started a night course in bookkeeping on Tuesdays, finally.", what="bookkeeping", day="Tuesday",
                later="I reconciled a whole fake company's books for the midterm and the numbers matched. I screamed.",
                q_later="How did {n}'s midterm in {pos} evening course go?", a_later="the numbers matched on the practice company's books",
                od=("Could {n} help a friend keep the accounts of a small business?", "Possibly: {sub} is studying bookkeeping")),
           dict(txt="I joined a Wednesday night glassblowing class. Molten glass! Me!", what="glassblowing", day="Wednesday",
                later="I blew a wobbly green paperweight and nobody got burned.", q_later="What object did {n} make in {pos} evening course?", a_later="a wobbly green paperweight",
                od=("Has {n} worked with molten material in a furnace?", "Yes: {sub} takes a glassblowing class"))]


@arc("course", "hobby")
def arc_course(a):
    c = a.pick("course", COURSES)

    def s0(t):
        f = t.say(c["txt"], dom="hobby")
        t.react("pos", "hobby")
        t.q("single-hop", t.cq(f"What is {t.n} learning after work?", f"What skill is {t.n} studying in the evenings?", f"What class did {t.n} sign up for?"), [f], c["what"])
        t.q("single-hop", f"Which evening of the week is {t.n} busy with lessons?", [f], c["day"])
        a.st["f"] = f

    def s1(t):
        f = t.say(c["later"])
        t.react("pos")
        t.q("single-hop", c["q_later"].format(n=t.n, pos=t.pos), [f], c["a_later"])
        t.q("multi-hop", f"What is {t.n} learning at night, and what has {t.sub} done with it so far?", [a.st["f"], f], f"{c['what']}; {c['a_later']}")
        t.q("open-domain", c["od"][0].format(n=t.n), [a.st["f"]], c["od"][1].format(sub=t.sub))
        t.tag("hobby", a.st["f"], c["what"])
    return [s0, s1]


PODCASTS = [("a podcast about shipwrecks", "shipwrecks", "Would {n} enjoy a visit to a maritime museum with a sunken-ship exhibit?"),
            ("an audiobook history of the Ottoman Empire", "the Ottoman Empire", "Would {n} enjoy a guided tour of Istanbul's Topkapı Palace?"),
            ("a show where two comedians rank sandwiches", "ranking sandwiches", "Would {n} enjoy a food-themed comedy night?"),
            ("a podcast about unsolved museum heists", "museum heists", "Would {n} enjoy a true-crime documentary about stolen paintings?"),
            ("lectures on volcanoes", "volcanoes", "Would {n} enjoy a hike up to a volcanic crater?")]


@arc("listen", "hobby")
def arc_listen(a):
    p = a.pick("pod", PODCASTS)
    commute = a.c("on my drive to work", "on the train in the mornings", "on my bike ride to the office")

    def s0(t):
        f = t.say(f"I've been listening to {p[0]} {commute}. I'm now an expert, apparently.")
        t.react("neu")
        t.q("single-hop", t.cq(f"What is the subject of what {t.n} listens to while commuting?", f"What has {t.n} been listening to about on the way to work?"), [f], p[1])
        t.tag("hobby", f, f"listens to {p[0]}")
        t.q("open-domain", p[2].format(n=t.n), [f], f"Likely yes: {t.sub} listens to {p[0]}")
    return [s0]


DRINKS = [("I switched from coffee to matcha, coffee gives me the jitters now.", "matcha", "coffee gave {obj} the jitters"),
          ("Off coffee. It's yerba mate now, my stomach was not coping.", "yerba mate", "coffee upset {pos} stomach"),
          ("I've gone full decaf. Three cups a day of basically nothing, and I sleep like a baby.", "decaf coffee", "to sleep better"),
          ("Traded my morning espresso for chai. Less crash in the afternoon.", "chai", "to avoid the afternoon crash")]


@arc("drink", "food")
def arc_drink(a):
    d = a.pick("drink", DRINKS)

    def s0(t):
        f = t.say(d[0], dom="food")
        t.react("neu", "food")
        t.q("single-hop", t.cq(f"What is {t.n}'s morning beverage now?", f"What does {t.n} sip to start the day these days?", f"What does {t.n} drink instead of regular coffee now?"), [f], d[1])
        t.q("single-hop", f"Why did {t.n} give up {t.pos} old caffeine habit?" if d[1] != "decaf coffee" else f"Why did {t.n} cut out caffeine?", [f], d[2].format(obj=t.obj, pos=t.pos))
        t.q("open-domain", f"Would a gift card for an espresso bar be a great present for {t.n}?", [f], f"Maybe not: {t.sub} gave up regular coffee for {d[1]}")
        t.tag("food", f, f"drinks {d[1]}")
    return [s0]


@arc("chrono", "health")
def arc_chrono(a):
    owl = a.c(True, False)

    def s0(t):
        if owl:
            f = t.say("I'm useless before ten. Please schedule nothing with me before then, I mean it.")
            t.q("open-domain", f"Would a 7 am breakfast meeting suit {t.n}?", [f], "No: {sub} is useless before ten".format(sub=t.sub))
            t.q("single-hop", f"When in the day is {t.n} least productive?", [f], "before ten in the morning")
        else:
            f = t.say("I'm up at five every day without an alarm, and by nine at night I'm a pumpkin.")
            t.q("open-domain", f"Would {t.n} enjoy a concert that starts at 11 pm?", [f], "Probably not: {sub} is asleep by nine".format(sub=t.sub))
            t.q("single-hop", f"What time does {t.n} naturally get out of bed?", [f], "at five")
        t.react("neu")
    return [s0]


VOLUNTEER = [("I've started helping out at the food bank on Tuesday nights, sorting cans mostly.", "sorting cans at the food bank", "Tuesday"),
             ("I signed up to walk dogs at the animal shelter on Sunday mornings.", "walking dogs at the animal shelter", "Sunday"),
             ("I'm tutoring two teenagers in algebra at the library on Wednesdays.", "tutoring teenagers in algebra at the library", "Wednesday"),
             ("I read to residents at the nursing home on Friday afternoons now.", "reading to nursing home residents", "Friday")]


@arc("volunteer", "social")
def arc_volunteer(a):
    v = a.pick("vol", VOLUNTEER)

    def s0(t):
        f = t.say(v[0])
        t.react("pos", "social")
        t.q("single-hop", t.cq(f"How does {t.n} give back to {t.pos} community?", f"What unpaid work has {t.n} taken on?"), [f], v[1])
        t.q("single-hop", f"On which day is {t.n} busy with charity work?", [f], v[2])
        t.tag("social", f, v[1])
        t.q("open-domain", f"Would {t.n} be open to helping with a neighborhood charity drive?", [f], f"Likely yes: {t.sub} already volunteers ({v[1]})")
    return [s0]


# ---------------------------------------------------------------------------- travel

DESTS = [
    dict(p="Porto", country="Portugal", hl="a port-wine cellar tour across the river", hl_a="a port-wine cellar tour", weather="mild and a bit rainy"),
    dict(p="Ljubljana", country="Slovenia", hl="a day trip to Lake Bled, we rowed out to the island church", hl_a="rowing to the island church on Lake Bled", weather="crisp and sunny"),
    dict(p="Hokkaido", country="Japan", hl="soaking in an outdoor hot spring while it snowed", hl_a="an outdoor hot spring in the snow", weather="very cold and snowy"),
    dict(p="the Azores", country="Portugal", hl="whale watching off São Miguel, we saw a sperm whale", hl_a="whale watching; they saw a sperm whale", weather="changeable, four seasons in a day"),
    dict(p="Crete", country="Greece", hl="hiking the Samaria Gorge down to the sea", hl_a="walking the Samaria Gorge", weather="hot and dry"),
    dict(p="Banff", country="Canada", hl="canoeing on Moraine Lake at sunrise", hl_a="canoeing on Moraine Lake at sunrise", weather="cool, with snow possible up high"),
    dict(p="Quebec City", country="Canada", hl="the winter carnival and an ice hotel tour", hl_a="the winter carnival and the ice hotel", weather="bitterly cold"),
    dict(p="Tasmania", country="Australia", hl="seeing wombats at Cradle Mountain", hl_a="wombats at Cradle Mountain", weather="cool and windy"),
    dict(p="Sri Lanka", country="Sri Lanka", hl="the train through the tea hills to Ella", hl_a="the train ride through the tea hills", weather="hot and humid"),
    dict(p="Vilnius", country="Lithuania", hl="a hot-air balloon ride over the old town", hl_a="a hot-air balloon over the old town", weather="chilly"),
    dict(p="Cartagena", country="Colombia", hl="salsa in a tiny bar in Getsemaní", hl_a="dancing in a tiny bar in Getsemaní", weather="hot and sticky"),
    dict(p="Tallinn", country="Estonia", hl="a sauna followed by a jump into the Baltic", hl_a="a sauna and a jump into the Baltic", weather="cold by the sea"),
    dict(p="Sicily", country="Italy", hl="walking up to the craters on Mount Etna", hl_a="the craters on Mount Etna", weather="warm"),
    dict(p="the Faroe Islands", country="Denmark (the Faroe Islands)", hl="puffins on the cliffs of Mykines", hl_a="puffins on Mykines", weather="wet and windy"),
]
OCCASIONS = ["anniversary", "birthday", "spring break", "long weekend in the fall", "honeymoon redo", "sister trip"]


@arc("trip", "travel", 1.5)
def arc_trip(a):
    a.maxgap = 4
    a.echo = ["Still jet-lagged, I woke up at 4 and ate cereal in the dark.", "Printed some of the trip photos for the fridge."]
    A, B = a.pick("dest", DESTS), a.pick("dest", DESTS)
    occ = a.c(*OCCASIONS)
    mon = MONTHS[a.rng.randrange(12)]
    price = a.c(420, 560, 690, 830, 1140)

    def s0(t):
        f = t.say(f"Trying to decide between {A['p']} and {B['p']} for our {occ} trip in {mon}.", dom="travel")
        v = t.other(grp=[f"{B['p']}!! no contest", f"{A['p']} is nice but {B['p']} is on my list forever"],
                    asst=f"Both are great choices. In {mon}, {B['p']} tends to be {B['weather']}, while {A['p']} is usually {A['weather']}, so it partly depends on whether you want to be outdoors all day.",
                    dom="travel", mood="pos")
        t.q("single-hop", t.cq(f"Which two places was {t.n} weighing for the getaway?", f"What were {t.n}'s two candidate destinations?",
                              f"Which two places was {t.n} trying to decide between for the {occ} trip?"), [f], f"{A['p']} and {B['p']}")
        if t.asst:
            t.q("single-hop", f"What weather did {t.who(v)} tell {t.n} to expect in {B['p']}?", [v], B["weather"])
        a.st["f"] = f

    def s1(t):
        ph, x = t.future(("ondate", "tendays", "weekfrom", "onwd"))
        f = t.say(t.c(f"Booked it! {cap(B['p'])}, flying out {ph}. Flights were {money(price)} each.", f"Okay it's official: {B['p']}. We leave {ph}, {money(price)} a ticket."), dom="travel")
        t.react("pos", "travel")
        t.q("single-hop", t.cq(f"Where did {t.n} decide to go?", f"What destination did {t.n} settle on?", f"Where did {t.n} end up booking the trip to?"), [f], B["p"])
        t.q("temporal", t.c(f"When was {t.n} due to leave?", f"On what date did {t.n}'s holiday begin?"), [f], t.ans(x))
        t.q("single-hop", t.cq(f"How much did {t.n} pay per seat on the plane?", f"How much were {t.n}'s flights?"), [f], money(price))
        t.q("multi-hop", f"Which option did {t.n} rule out for the {occ}?", [a.st["f"], f], A["p"])
        t.dated(x, f"{t.n} leaving for {B['p']}", f)
        a.st["f1"] = f

    def s2(t):
        t.ask([f"welcome home!! how was {B['p']}", "how was the trip??"], f"How was the trip to {B['p']}?", dom="travel", p=0.5)
        f = t.say(t.c(f"Back from {B['p']}. The best part was {B['hl']}.", f"Home! Jet-lagged. Best thing we did in {B['p']}: {B['hl']}."))
        t.react("pos", "travel")
        t.q("single-hop", t.cq(f"What was the highlight of {t.n}'s vacation?", f"What did {t.n} enjoy most while away?", f"What was the best part of {t.n}'s trip to {B['p']}?"), [f], B["hl_a"])
        t.q("open-domain", f"In which country was {t.n}'s {occ} trip?", [a.st["f1"]], B["country"])
        t.q("multi-hop", f"How much did {t.n}'s flights cost, and what was the best part of the trip?", [a.st["f1"], f], f"{money(price)} each; {B['hl_a']}")
        t.tag("travel", f, B["p"])
    return [s0, s1, s2]


@arc("passport", "travel")
def arc_passport(a):
    a.maxgap = 5
    mon = MONTHS[a.rng.randrange(12)]

    def s0(t):
        f = t.say(f"Just noticed my passport expires in {mon}. How did that sneak up on me?", dom="travel")
        t.other(grp=["renew it NOW, it takes forever", "lol same thing happened to me"],
                asst="It's worth renewing now rather than later; processing times vary a lot by season, and some countries want several months of validity left when you arrive.",
                dom="travel", mood="neu")
        t.q("single-hop", t.cq(f"In which month does {t.n}'s old travel document run out?", f"When does {t.n}'s old passport expire?"), [f], mon)
        a.st["f"] = f

    def s1(t):
        ph, x = t.past()
        f = t.say(t.c(f"New passport arrived {ph}. The photo is tragic, I look like a hostage.", f"{cap(ph)} the new passport came in the mail. Ten years of this awful photo."))
        t.react("pos")
        t.q("temporal", f"When did {t.n}'s renewed travel document show up?", [f], t.ans(x))
        t.q("single-hop", f"What does {t.n} think of {t.pos} new ID picture?", [f], "it's tragic / awful")
        t.dated(x, f"{t.n}'s new passport arriving", f)
    return [s0, s1]


# ---------------------------------------------------------------------------- tools and software

NOTES = [("Evernote", "Obsidian"), ("Apple Notes", "Notion"), ("OneNote", "Logseq"), ("a paper notebook", "Bear"), ("Google Keep", "Obsidian")]


@arc("notes", "tech")
def arc_notes(a):
    a.echo = ["I spent an hour tagging old notes instead of doing actual work."]
    old, new = a.pick("notes", NOTES)
    k = a.c(800, 1400, 2300)

    def s0(t):
        f = t.say(f"Moved all my notes from {old} into {new} over the weekend. {k} of them. Why do I have {k} notes?", dom="tech")
        t.react("neu", "tech")
        t.q("single-hop", t.cq(f"Which program does {t.n} use now to organize {t.pos} thoughts?", f"Where does {t.n} keep {t.pos} notes now?"), [f], new)
        t.q("single-hop", t.cq(f"What did {t.n} migrate away from?", f"Which app did {t.n} move {t.pos} notes out of?"), [f], old)
        t.q("single-hop", t.cq(f"How many entries did {t.n} carry over?", f"How many notes did {t.n} move over?"), [f], str(k))
        t.tag("tools", f, new)
    return [s0]


LAPTOPS = [("ThinkPad X1 Carbon", "the hinge snapped"), ("MacBook Air", "it won't charge anymore"), ("Framework 13", "I spilled tea on the keyboard"),
           ("Dell XPS 13", "the screen started flickering"), ("refurbished Surface Laptop", "the battery swelled up")]


@arc("laptop", "tech")
def arc_laptop(a):
    a.maxgap = 2
    a.echo = ["Finally moved all my files over to the new computer. Took a whole evening."]
    model, fail = a.pick("laptop", LAPTOPS)

    def s0(t):
        f = t.say(f"My laptop finally died, {fail}. Ordered a {model}.", dom="tech")
        t.react("neg", "tech")
        t.q("single-hop", t.cq(f"What computer did {t.n} get?", f"Which machine did {t.n} buy to replace the broken one?", f"Which laptop did {t.n} order?"), [f], model)
        t.q("single-hop", t.cq(f"What went wrong with {t.n}'s old machine?", f"What happened to {t.n}'s old laptop?"), [f], fail.replace("I ", t.sub + " "))
        a.st["f"] = f

    def s1(t):
        ph, x = t.past(("yest", "dby", "onwd"))
        f = t.say(t.c(f"The {model} arrived {ph} and it's so light I keep thinking I forgot it at home.", f"{cap(ph)} the {model} was delivered. It boots in four seconds, I'm in love."))
        t.react("pos", "tech")
        t.q("temporal", f"When was {t.n}'s new computer delivered?", [f], t.ans(x))
        t.dated(x, f"{t.n}'s new computer arriving", f)
        t.tag("tools", a.st["f"], model)
    return [s0, s1]


PM = ["Bitwarden", "1Password", "KeePassXC", "Proton Pass"]


@arc("hacked", "tech")
def arc_hacked(a):
    a.maxgap = 3
    pm = a.pick("pm", PM)
    k = a.c(140, 212, 307)

    def s0(t):
        ph, x = t.past(("yest", "dby", "onwd", "morning"))
        f = t.say(t.c(f"Someone got into my email {ph} and sent spam to my entire contact list. My dentist got a crypto pitch from me.",
                      f"{cap(ph)} my inbox got hijacked. Everyone I know got a link to 'amazing investment opportunities'."), dom="tech")
        v = t.other(grp=["change every password and get a password manager. today", "turn on 2FA on everything, like now"],
                    asst="First change that password and any account that shared it, then set up a password manager so every account gets a unique password, and turn on two-factor authentication with an authenticator app rather than text messages.",
                    dom="tech", mood="neg")
        t.q("temporal", t.c(f"When was {t.n}'s account compromised?", f"On what day did someone break into {t.n}'s mailbox?"), [f], t.ans(x))
        t.q("single-hop", f"What did {t.who(v)} tell {t.n} to do after the break-in?", [v], "change passwords, use a password manager, turn on two-factor authentication")
        t.dated(x, f"the break-in to {t.n}'s email", f)
        a.st["f"] = f

    def s1(t):
        f = t.say(f"Set up {pm} and changed every single password. {k} of them. I need a lie down.")
        t.react("pos", "tech")
        t.q("single-hop", t.cq(f"What security software did {t.n} start using?", f"Which password manager did {t.n} set up?"), [f], pm)
        t.q("multi-hop", f"What happened to {t.n}'s email, and how did {t.sub} respond?", [a.st["f"], f], f"it was hacked and sent spam; {t.sub} set up {pm} and changed {k} passwords")
        t.tag("tools", f, pm)
    return [s0, s1]


TRACKERS = [("Trello", "Jira"), ("Asana", "Linear"), ("a shared spreadsheet", "Monday.com"), ("Basecamp", "ClickUp")]


@arc("worktool", "tech")
def arc_worktool(a):
    a.echo = ["Spent the whole morning filling in fields on tickets at work. This is my life now."]
    t1, t2 = a.pick("tracker", TRACKERS)

    def s0(t):
        f = t.say(f"Our team is moving from {t1} to {t2} and everyone hates it. Forty fields per ticket.", dom="tech")
        t.react("neg", "tech")
        t.q("single-hop", f"Which project tracker does {t.n}'s team use now?", [f], t2)
        t.q("single-hop", t.cq(f"What did {t.n}'s colleagues use before the switch?", f"Which tool is {t.n}'s team moving away from?"), [f], t1)
        t.q("open-domain", f"Is {t.n}'s team happy with the change of software?", [f], "No: everyone hates it")
        t.tag("tools", f, t2)
    return [s0]


VEHICLES = [
    dict(new="used Subaru Outback", kind="a used Subaru Outback (a station wagon)", od=("Would {n}'s new car be a sensible choice for snowy mountain roads?", "Yes: Outbacks have all-wheel drive")),
    dict(new="Toyota Prius", kind="a Toyota Prius", od=("Is {n} likely to spend less at the pump now?", "Yes: the Prius is a hybrid")),
    dict(new="Honda Odyssey", kind="a Honda Odyssey (a minivan)", od=("Could {n} fit a family of seven in the new vehicle?", "Yes: the Odyssey is a minivan with seven or eight seats")),
    dict(new="Ford Maverick", kind="a Ford Maverick (a small pickup truck)", od=("Could {n} haul lumber home in {pos} new vehicle?", "Yes: the Maverick is a pickup truck")),
    dict(new="Nissan Leaf", kind="a Nissan Leaf", od=("Does {n}'s new car need gasoline?", "No: the Leaf is electric")),
    dict(new="cargo e-bike", kind="a cargo e-bike", od=("Will {n} need a parking permit for the new ride?", "No: it's an e-bike")),
]
OLD_CARS = [("2009 Civic", "the transmission is shot"), ("old Corolla", "the head gasket blew"), ("2011 Focus", "the clutch went"), ("ancient Jetta", "the engine is done")]


@arc("vehicle", "money")
def arc_vehicle(a):
    old, fail = a.pick("oldcar", OLD_CARS)
    v = a.pick("car", VEHICLES)
    a.echo = ["Took the long way home today just to drive more. I'm that person now.", "Parking downtown is still a nightmare, new wheels or not."]

    def s0(t):
        ph, x = t.past(("yest", "onwd", "wdpart"))
        f = t.say(f"My {old} finally died on the highway {ph}. The mechanic says {fail}, not worth fixing.", dom="money")
        t.react("neg", "money")
        t.q("single-hop", t.cq(f"What happened to {t.n}'s previous vehicle?", f"Why did {t.n} need new wheels?", f"What did the mechanic say about {t.n}'s old car?"), [f], fail)
        t.q("single-hop", f"What model was {t.n}'s old ride?", [f], old)
        t.dated(x, f"{t.n}'s old car breaking down", f)
        a.st["f"] = f

    def s1(t):
        t.ask(["did you ever find a new car?", f"{t.n} are you still carless"], "Did you end up replacing the car that broke down?", dom="money", p=0.5)
        ph, x = t.past(("yest", "onwd", "lastwd", "dby"))
        f = t.say(t.c(f"Finally picked up a {v['new']} {ph}.", f"{cap(ph)} I drove home in a {v['new']}. Mine! Well, mine and the bank's."))
        t.react("pos", "money")
        t.q("single-hop", t.cq(f"What kind of vehicle did {t.n} buy?", f"What did {t.n} get to replace the car that broke?", f"What did {t.n} finally pick up to drive?"), [f], v["kind"])
        t.q("temporal", t.c(f"When did {t.n} get {t.pos} new set of wheels?", f"When did {t.n} take home {t.pos} purchase from the dealer?"), [f], t.ans(x))
        t.q("open-domain", v["od"][0].format(n=t.n, pos=t.pos), [f], v["od"][1])
        t.q("multi-hop", f"What did {t.n} drive before and after the breakdown?", [a.st["f"], f], f"{old}, then {v['kind']}")
        t.dated(x, f"{t.n}'s vehicle purchase", f)
        t.tag("money", f, f"bought {v['kind']}")
    return [s0, s1]


# ---------------------------------------------------------------------------- people

TOAST_RES = [("Everyone cried, including the DJ. Nailed it.", "everyone cried, including the DJ"),
             ("I lost the last page of my notes but improvised, and people laughed in the right places.", "{sub} lost the last page but improvised and people laughed"),
             ("My voice shook for the first minute and then it was fine. The groom's grandma hugged me after.", "nervous at first, then fine; the groom's grandma hugged {obj}")]


@arc("toast", "social")
def arc_toast(a):
    a.maxgap = 3
    g = a.c("f", "m")
    rel = a.c("sister" if g == "f" else "brother", "best friend", "cousin")
    name, rp = a.side(g)
    res = a.c(*TOAST_RES)

    def s0(t):
        ph, x = t.future(("ondate", "tendays", "weekfrom"))
        f = t.say(f"My {rel} {name} asked me to give a speech at {rp['pos']} wedding {ph}. I have zero jokes.", dom="social")
        v = t.other(grp=["one story, three minutes max, end by raising a glass", "keep it short and don't do inside jokes"],
                    asst="Keep it under three minutes, tell one specific story that shows who they are, and end by raising a glass to both of them.",
                    dom="social", mood="pos")
        t.q("single-hop", f"What was {t.n} asked to do at {name}'s ceremony?", [f], "give a speech at the wedding")
        t.q("single-hop", t.cq(f"How long did {t.who(v)} say {t.n}'s toast should last?", f"What did {t.who(v)} advise {t.n} about the toast?"), [v],
            "under three minutes, one story, end by raising a glass" if t.asst else v.text)
        t.q("temporal", f"When was {name}'s big day?", [f], t.ans(x))
        t.q("open-domain", f"Is {t.n} close to {name}?", [f], f"Likely yes: {name} asked {t.obj} to give a speech at the wedding")
        t.dated(x, f"{name}'s wedding", f)
        a.st["f"] = f

    def s1(t):
        t.ask(["how did the speech go??", f"{t.n} the speech!! tell us"], "How did the wedding speech go?", dom="social")
        f = t.say(res[0])
        t.react("pos")
        t.q("single-hop", f"How did {t.n}'s remarks at the reception go over?", [f], res[1].format(sub=t.sub, obj=t.obj))
        t.q("multi-hop", f"Whose wedding did {t.n} speak at, and how was it received?", [a.st["f"], f], f"{t.pos} {rel} {name}'s; " + res[1].format(sub=t.sub, obj=t.obj))
    return [s0, s1]


@arc("visit", "social")
def arc_visit(a):
    who = a.c("mom", "dad", "grandmother", "aunt")
    k = a.c(2, 3)
    why = a.c(("after her knee surgery", "to recover from knee surgery"), ("while her kitchen gets redone", "while her kitchen is renovated"),
              ("because she's between apartments", "because she is between apartments")) if who != "dad" else a.c(
              ("after his knee surgery", "to recover from knee surgery"), ("while his kitchen gets redone", "while his kitchen is renovated"))

    def s0(t):
        ph, x = t.future(("ondate", "weekfrom", "onwd"))
        f = t.say(f"My {who} is coming to stay for {NUM[k]} weeks {why[0]}. Arriving {ph}. I need to clear out the office.", dom="social")
        t.react("neu", "social")
        t.q("temporal", f"When was {t.n}'s relative due to arrive?", [f], t.ans(x))
        t.q("single-hop", t.cq(f"Why is a family member moving in with {t.n} for a while?", f"Why is {t.n}'s {who} coming to stay?"), [f], why[1])
        t.q("single-hop", f"How long is {t.n}'s house guest staying?", [f], f"{k} weeks")
        t.dated(x, f"{t.n}'s {who} arriving to stay", f)
        t.q("open-domain", f"Will {t.n} be able to work from {t.pos} home office during the visit?", [f], "Probably not: the office is being cleared out for the guest")
    return [s0]


LOST = [dict(item="my grandfather's watch", q="What heirloom did {n} misplace?", a="{pos} grandfather's watch",
             found="Found the watch! It was in the pocket of my winter coat the whole time.", where="in the pocket of {pos} winter coat"),
        dict(item="my wedding ring", q="What piece of jewelry did {n} lose?", a="{pos} wedding ring",
             found="The ring turned up inside the vacuum cleaner bag. I have never been so happy to dig through dust.", where="in the vacuum cleaner bag"),
        dict(item="the only key to my bike lock", q="What did {n} lose that left {pos} bicycle stuck?", a="the only key to {pos} bike lock",
             found="A neighbor found the key in the gutter outside and taped it to my door with a smiley face.", where="in the gutter outside; a neighbor taped it to {pos} door"),
        dict(item="my work badge", q="What did {n} misplace that {sub} needs to get into the office?", a="{pos} work badge",
             found="Badge found: it was clipped to the dog's leash. Don't ask.", where="clipped to the dog's leash")]


@arc("lost", "home")
def arc_lost(a):
    a.maxgap = 3
    x = a.pick("lost", LOST)

    def s0(t):
        ph, d = t.past(("yest", "onwd", "dby"))
        f = t.say(t.c(f"I've lost {x['item']}. Last saw it {ph} and I've torn the place apart.", f"Panicking a little: {x['item']} is gone. I had it {ph}."))
        t.other(grp=["retrace your steps!!", "it's always in the last place you look (sorry)"],
                asst="Try retracing the last day you remember having it, step by step, and check the places things fall into: coat pockets, bags, under car seats and behind cushions.",
                dom="home", mood="neg")
        t.q("single-hop", x["q"].format(n=t.n, pos=t.pos, sub=t.sub), [f], x["a"].format(pos=t.pos))
        a.st["f"] = f

    def s1(t):
        t.ask([f"did you ever find {x['item'].replace('my ', 'your ')}?", "any luck finding it?"], f"Did you ever find {x['item'].replace('my ', 'your ')}?", dom="home", p=0.6)
        f = t.say(x["found"])
        t.react("pos")
        t.q("single-hop", f"Where did {t.n}'s missing item turn up?", [f], x["where"].format(pos=t.pos))
        t.q("multi-hop", f"What did {t.n} lose, and where was it in the end?", [a.st["f"], f], x["a"].format(pos=t.pos) + "; " + x["where"].format(pos=t.pos))
    return [s0, s1]


@arc("tax", "money")
def arc_tax(a):
    ref = a.c(640, 1240, 1875, 2310)
    use = a.c(("going straight into savings", "put it into savings"), ("going toward new tires", "new tires"), ("paying for a weekend away", "a weekend away"))

    def s0(t):
        ph, d = t.past(("yest", "onwd", "dby", "lastwd"))
        f = t.say(t.c(f"Filed my taxes {ph}! Refund of {money(ref)}, and it's {use[0]}.", f"{cap(ph)} I finally did my return. The government owes me {money(ref)}, which is {use[0]}."), dom="money")
        t.react("pos", "money")
        t.q("single-hop", t.cq(f"How much is {t.n} getting back from the government?", f"What sum will the IRS send {t.n}?", f"How big is {t.n}'s tax refund?"), [f], money(ref))
        t.q("single-hop", t.cq(f"What does {t.n} plan to do with the windfall?", f"What is {t.n} doing with the tax refund?"), [f], use[1])
        t.q("temporal", f"When did {t.n} submit {t.pos} annual return?" if "return" not in f.text else f"When did {t.n} deal with {t.pos} yearly paperwork for the government?", [f], t.ans(d))
        t.dated(d, f"{t.n} filing taxes", f)
        t.tag("money", f, f"a tax refund of {money(ref)}")
    return [s0]


GIFTS = [dict(who="dad", age=70, gift="a ride in a vintage biplane", od=("Is {n}'s father likely afraid of flying?", "Probably not: {sub} gave him a biplane ride for his 70th")),
         dict(who="mom", age=60, gift="a pottery weekend on the coast with her sisters", od=("Would {n}'s mother enjoy time away with her siblings?", "Likely yes: the gift was a weekend with her sisters")),
         dict(who="grandmother", age=90, gift="a framed family tree going back six generations", od=("Is {n}'s grandmother interested in family history?", "Likely: {sub} gave her a six-generation family tree")),
         dict(who="dad", age=65, gift="season tickets for the minor-league baseball team", od=("Does {n}'s father like sports?", "Yes: {sub} gave him baseball season tickets"))]


@arc("gift", "social")
def arc_gift(a):
    g = a.pick("gift", GIFTS)

    def s0(t):
        ph, d = t.future(("ondate", "weekfrom", "onwd"))
        f = t.say(f"My {g['who']} turns {g['age']} {ph} and I got {g['gift']}. Don't tell anyone.", dom="social")
        t.react("pos", "social")
        t.q("single-hop", t.cq(f"What present did {t.n} arrange for {t.pos} {g['who']}'s milestone birthday?", f"What did {t.n} get {t.pos} {g['who']} for turning {g['age']}?"), [f], g["gift"])
        t.q("temporal", f"When is {t.n}'s {g['who']}'s big birthday?", [f], t.ans(d))
        t.q("open-domain", g["od"][0].format(n=t.n), [f], g["od"][1].format(sub=t.sub))
        t.dated(d, f"{t.n}'s {g['who']}'s {g['age']}th birthday", f)
    return [s0]


NOISE = [("tap dancing at eleven at night", "tap dancing late at night"), ("a drum kit every Sunday morning", "drumming on Sunday mornings"),
         ("a dog that howls whenever they leave", "a dog that howls when left alone"), ("a karaoke machine on weeknights", "karaoke on weeknights")]
NOISE_FIX = [("I left a polite note with cookies. Now they put down a rug and stop by ten. Peace!", "a polite note with cookies; they put down a rug and stop by ten"),
             ("Talked to them on the stairs. They had no idea, they were mortified, and it's been quiet since.", "talked to them; they had no idea and it has been quiet since"),
             ("Nothing worked, so I bought a white noise machine. It's fine. I'm fine.", "nothing worked; {sub} bought a white noise machine")]


@arc("neighbor", "home")
def arc_neighbor(a):
    a.maxgap = 4
    nz, fx = a.pick("noise", NOISE), a.c(*NOISE_FIX)

    def s0(t):
        f = t.say(f"The new neighbors have {nz[0]}. The walls are paper.")
        t.react("neg")
        t.q("single-hop", t.cq(f"What racket were {t.n}'s new neighbors making?", f"What was keeping {t.n} up next door?", f"What noise problem did {t.n} have with the new neighbors?"), [f], nz[1])
        a.st["f"] = f

    def s1(t):
        t.ask(["any progress with the noisy neighbors?", "are the neighbors still at it?"], "Did anything change with the neighbors and the noise?", dom="home")
        f = t.say(fx[0])
        t.react("neu")
        t.q("single-hop", f"How did {t.n} deal with the racket from next door?", [f], fx[1].format(sub=t.sub))
        t.q("multi-hop", f"What was the trouble with {t.n}'s neighbors, and how did it end?", [a.st["f"], f], nz[1] + "; " + fx[1].format(sub=t.sub))
    return [s0, s1]


# --------------------------------------------------------------------------------------
# Filler: what people say that answers no question (it shares plenty of words with them)
# --------------------------------------------------------------------------------------

ASST_QA = [  # a user's general question and the assistant's answer; about nobody's life
    ("What's the actual difference between all-wheel drive and four-wheel drive on a vehicle?",
     "All-wheel drive sends power to all four wheels automatically and is always on, which helps on wet or icy roads. Four-wheel drive is usually something you switch on, and it's built for rougher terrain like mud, deep snow or rocky trails. For everyday driving, either is fine; the tires matter more than most people think."),
    ("How long should I boil an egg for a jammy yolk?",
     "For a large egg straight from the fridge, lower it into water that's already boiling and cook it for six and a half to seven minutes, then move it straight into ice water for a couple of minutes. The ice bath stops the cooking and makes the shell easier to peel."),
    ("Can you explain what an index fund is in simple terms?",
     "An index fund is a single investment that holds a little bit of every company in a market index, such as the S&P 500. Instead of someone picking winners, it simply follows the whole market, which keeps fees low. It goes up and down with the market, so it suits money you won't need for several years."),
    ("What's a good substitute for buttermilk in pancakes?",
     "Stir one tablespoon of lemon juice or white vinegar into a cup of regular milk and let it sit for five to ten minutes until it thickens slightly. Plain yogurt thinned with a little milk also works. The acidity is what reacts with the baking soda, so the pancakes still rise nicely."),
    ("Is it bad to charge my phone overnight?",
     "Modern phones stop charging at full and most have an optimized charging setting that holds the battery around eighty percent until shortly before you usually unplug. Heat is the bigger enemy of battery health, so avoid charging under a pillow or in direct sun. Overnight charging itself is generally fine."),
    ("How do I get a red wine stain out of a rug?",
     "Blot, don't rub, with a clean cloth to lift as much as you can. Then mix a tablespoon of dish soap and a tablespoon of white vinegar in two cups of warm water, dab it on, and blot again. For a light rug, a paste of baking soda left to dry and then vacuumed can pull out what remains."),
    ("How do I politely decline a wedding invitation?",
     "Reply promptly, thank them warmly, and keep the reason brief; you don't owe a detailed explanation. Something like: we're so honored to be invited, and we're sorry we can't be there, but we'll be celebrating you from afar. Sending a card or a small gift from the registry is a kind touch."),
    ("What's the difference between a credit score and a credit report?",
     "A credit report is the detailed record of your accounts, balances, payment history and inquiries. A credit score is a number calculated from that report to summarize how risky you look to a lender. You can usually get your reports for free, and checking your own doesn't hurt your score."),
    ("How often should I replace a toothbrush?",
     "Roughly every three months, or sooner if the bristles are frayed. It's also sensible to replace it after you've been sick. For electric toothbrushes, the same timing applies to the brush head, and many have indicator bristles that fade when it's time."),
    ("How do I keep houseplants alive while I'm away for two weeks?",
     "Water them well the day before you leave and move them away from hot, sunny windows. Grouping plants together raises humidity. For thirsty ones, a self-watering spike or a wick from a jar of water into the soil works well, and succulents will usually be fine on their own."),
    ("What should I look for when buying a used bike?",
     "Check that the frame has no cracks or dents, especially near the joints, spin both wheels to see that they're straight, and squeeze the brakes hard. Shift through all the gears on a short test ride. Surface rust on the chain is cheap to fix, but a bent frame isn't worth buying."),
    ("How can I make a room with hard floors less echoey?",
     "Soft surfaces absorb sound: a large rug, heavy curtains, upholstered furniture and a full bookshelf all help. Even a few canvas prints or fabric panels on the walls make a noticeable difference. Corners and parallel bare walls are where echo builds up, so start there."),
    ("What's the difference between baking soda and baking powder?",
     "Baking soda is pure sodium bicarbonate and needs an acid in the recipe, like buttermilk or lemon juice, to react. Baking powder already contains both the soda and a dry acid, so it only needs moisture and heat. That's why recipes with acidic ingredients often call for soda."),
    ("How do I clean a cast iron pan without ruining it?",
     "Rinse it with hot water while it's still warm and scrub with a brush or coarse salt; a little soap is fine despite the myth. Dry it completely on the stove, then wipe a very thin layer of oil over the surface. Avoid soaking it or putting it in the dishwasher."),
    ("Is an extended warranty on electronics ever worth buying?",
     "Usually not: most defects show up within the manufacturer's warranty period, and the price of the extension is set so the seller profits on average. Exceptions can be expensive items that are often dropped or carried around, where accidental damage coverage is included. Also check what your credit card already covers."),
    ("How do noise-cancelling headphones actually work?",
     "Small microphones on the ear cups pick up outside sound, and the headphones generate the opposite sound wave, which cancels it out. This works best for steady, low noises like engines and air conditioning. Sudden or high-pitched sounds are harder to cancel, which is why voices still get through."),
    ("What's a houseplant that's genuinely hard to kill?",
     "A snake plant or a ZZ plant is very forgiving: both tolerate low light and only need water every two or three weeks. Pothos is another good choice and tells you when it's thirsty by drooping. The most common way people kill them is overwatering, not neglect."),
    ("How do I unclog a slow bathroom drain without harsh chemicals?",
     "Remove the stopper and pull out any hair with a plastic drain snake, which fixes most slow bathroom sinks. Then pour in half a cup of baking soda followed by a cup of vinegar, wait fifteen minutes and flush with hot water. If it's still slow, the trap under the sink can be unscrewed and cleaned."),
    ("Any tricks for remembering people's names?",
     "Say the name back right away, use it once more in the conversation, and link it to something vivid, like a person named Rose holding a flower. Writing new names down afterwards also helps. Most people forget names because they're busy thinking about what to say next, so slowing down for a second matters."),
    ("Why do cats knead blankets?",
     "Kneading is a behavior kittens use while nursing, and many cats keep doing it as adults when they feel content and safe. It also marks territory with scent glands in their paws. If the claws are a problem, a thick blanket on your lap is a good compromise."),
    ("How do I pick a ripe avocado at the store?",
     "Gently press it with your palm rather than your fingertips: a ripe one yields slightly. You can also flick off the little stem cap; green underneath means it's good, brown means it's overripe. A firm one will ripen on the counter in a few days, faster in a paper bag with a banana."),
    ("How should I write an out-of-office message?",
     "Keep it to three parts: the dates you're away, whether you'll be checking email, and who to contact for anything urgent, with their address. Skip the detail about where you're going. A short, friendly line at the end is enough."),
    ("What's the best way to store fresh herbs?",
     "Treat soft herbs like basil, parsley and cilantro like flowers: trim the stems and stand them in a glass of water, loosely covered. Basil prefers the counter, while the others keep longer in the fridge. Hardy herbs like rosemary and thyme last best wrapped in a damp paper towel in a container."),
    ("Is it worth getting a new phone plan every couple of years?",
     "It's worth comparing at least once a year, because carriers often give better prices to new customers than to loyal ones. Look at how much data you actually use each month; many people pay for far more than they need. Prepaid and smaller carriers that run on the same networks are often much cheaper."),
]
USER_ECHO_REPLY = ["Good to hear it's settling in.", "That sounds like progress.", "Ha, that's a very relatable feeling."]
GRP_BANTER = [
    ["anyone else's week dragging", "it's only tuesday??", "don't remind me"],
    ["trivia at the Crooked Anchor thursday?", "in", "only if we don't pick the team name this time"],
    ["I need a new show to watch, recs?", "the one about the lighthouse murders", "no spoilers I'm on episode 3"],
    ["who took my umbrella at brunch", "not me", "...it might've been me. sorry"],
    ["the bus was 25 minutes late this morning, walked in soaked", "classic", "this city honestly"],
    ["my neighbor's car alarm went off at 4am AGAIN", "call the city", "or buy earplugs, that's what I did"],
    ["random question: does anyone know a good tailor", "the one on 5th is decent", "thanks!"],
    ["happy friday nerds", "🎉", "finally"],
    ["what kind of pizza are we getting saturday", "pineapple obviously", "blocked"],
    ["my cousin just bought a boat. a BOAT", "who buys a boat", "people with boat money"],
    ["I have 47 unread emails and I'm choosing violence", "mark all as read", "the only way"],
    ["did anyone see the moon last night", "missed it", "it was huge, orange"],
    ["my phone autocorrected 'meeting' to 'meatballs' in a work email", "lmao", "honestly better"],
    ["is it just me or is everything more expensive every week", "not just you", "eggs cost what now"],
    ["sending this to the chat: a dog in a raincoat", "10/10", "I need him"],
    ["group dinner next month? I'll make a poll", "yes", "poll pls"],
    ["so tired, slept like 5 hours", "coffee", "coffee x2"],
    ["who's free to help me move a bookshelf on sunday", "I have a car", "I have arms"],
    ["my boss just scheduled a meeting called 'quick sync' for 90 minutes", "that's not quick", "that's not a sync either"],
    ["first day of actual sun, I'm outside and nobody can stop me", "jealous, I'm in a windowless room", "send vitamin d"],
    ["does anyone have a good recipe for a potluck, I'm out of ideas", "pasta salad never fails", "bring chips and own it"],
    ["my landlord texted 'we need to talk' and then nothing for three hours", "that's terrifying", "villain behavior"],
    ["what's everyone doing for the long weekend", "nothing and I can't wait", "visiting my parents, pray for me"],
    ["my plant is dying and I don't know why", "too much water probably", "it's always too much water"],
    ["reminder that it's Bartholomew's birthday thing on saturday", "what do we get him", "a card and a drink, he's simple"],
    ["just saw someone walking a cat on a leash", "power move", "we need a picture next time"],
    ["the new coffee place on Alder is good btw", "how's the price", "criminal but worth it"],
    ["my doctor's office put me on hold for 40 minutes today", "the hold music though", "I know it by heart now"],
    ["can someone remind me why I signed up for a 10k", "because you're brave", "because you lost a bet"],
    ["thinking about a trip somewhere warm in winter, anyone in?", "depends on the price", "I'm in if there's a beach"],
    ["my car is making a new noise, love that for me", "what kind of noise", "a sort of sad whistle"],
    ["does anyone use a budgeting app that isn't annoying", "a spreadsheet is all you need", "I just don't look at my account"],
    ["why is every app asking me to rate it", "5 stars to make it stop", "1 star out of spite"],
    ["stuck at the airport, flight delayed again", "noooo", "buy the overpriced sandwich, you've earned it"],
]
GRP_OPEN = [["morning all", "morning!"], ["hi friends", "hiii"], ["ok who's around", "here"], ["hello hello", "👋"],
            ["good morning chat", "it's too early for chat"], ["evening everyone", "hey!"], ["anyone alive", "barely"]]
GRP_CLOSE = [["ok gotta run, bye all", "bye!"], ["night everyone", "night!"], ["signing off, talk later", "👋"],
             ["dinner's ready, later", "enjoy"], ["back to work I guess", "same"]]
USER_OPEN = ["Hi again!", "Hey, it's me again.", "Good morning.", "Hi, got a few minutes?", "Evening! Back with a couple of things.",
             "Hello again.", "Hey there. Long day.", "Hi! Quick session today, I think."]
USER_CLOSE = ["That's all for today, thanks!", "Super helpful, thank you.", "Okay, I'll let you go. Thanks!",
              "Thanks, that's given me a lot to think about.", "Great, that's everything for now.", "Thank you, talk soon."]


# --------------------------------------------------------------------------------------
# Conversations: plan arcs per person, schedule their stages to sessions, render
# --------------------------------------------------------------------------------------

HOMEOWNER = ["roof", "yard", "heater"]
RENTER = ["rent", "savings"]
AGG = {  # tag: question phrasings (multi-hop over 2-3 facts of that kind from different sessions)
    "tools": ["What apps and gadgets has {n} mentioned relying on?", "Which pieces of tech are part of {n}'s daily life?"],
    "health": ["What medical issues has {n} dealt with?", "Which health complaints has {n} brought up?"],
    "home": ["What work has {n} had done around {pos} house?", "What household projects has {n} taken on?"],
    "money": ["What big financial events has {n} mentioned?", "Which milestones in {n}'s finances came up?"],
    "food": ["What should someone cooking for {n} keep in mind?", "What are {n}'s dietary needs and tastes?"],
    "work": ["What has been happening in {n}'s career?", "What professional developments has {n} shared?"],
    "hobby": ["How does {n} spend {pos} free time?", "What are {n}'s pastimes?"],
}


class Conv:
    def __init__(self, idx, seed):
        self.idx = idx
        self.rng = rng = random.Random(seed * 1000 + idx)
        self.kind, names = CONVS[idx]
        self.people = [Person(n, g) for n, g in names]
        self.sid = f"conv-{idx + 1}"
        self.used = {}
        self.questions, self.dated, self.tags = [], [], {}
        n_sess = rng.randint(30, 34) if self.kind == "assistant" else rng.randint(24, 28)
        t = dt.datetime(2024, rng.randint(1, 3), rng.randint(1, 28), rng.randint(8, 21), rng.choice([3, 11, 17, 26, 34, 42, 49, 55]))
        self.sessions = []
        for i in range(n_sess):
            self.sessions.append(Sess(i, t))
            t = t + dt.timedelta(days=rng.randint(4, 13), hours=rng.randint(-5, 5), minutes=rng.randint(-30, 30))
            if t.hour < 7 or t.hour > 22:
                t = t.replace(hour=rng.randint(8, 21))

    def plan(self):
        rng = self.rng
        self.arcs = []   # (person, ArcCtx, stages)
        names = list(ARCS)
        for P in self.people:
            side = rng.random() < 0.5
            banned = set(RENTER if side else HOMEOWNER)
            pool = [a for a in names if a not in banned]
            if self.kind == "assistant":
                k = min(len(pool), rng.randint(34, 37))
            else:
                k = rng.randint(11, 13) if len(self.people) == 4 else rng.randint(14, 16)
            chosen = []
            weights = {a: ARCS[a][2] for a in pool}
            while len(chosen) < k:
                xs = [a for a in pool if a not in chosen]
                chosen.append(rng.choices(xs, weights=[weights[a] for a in xs])[0])
            for name in chosen:
                ctx = ArcCtx(self, P)
                ctx.name, ctx.dom = name, ARCS[name][1]
                stages = ctx.stages = ARCS[name][0](ctx)
                self.arcs.append((P, ctx, stages))
        self.schedule()

    def schedule(self):
        """Each stage of an arc in its own session, in order, spread out; sessions kept about even."""
        rng, N = self.rng, len(self.sessions)
        load = [0] * N
        self.plan_of = [[] for _ in range(N)]     # per session: (person, ctx, stage index)
        order = list(range(len(self.arcs)))
        rng.shuffle(order)
        order.sort(key=lambda i: -len(self.arcs[i][2]))
        for i in order:
            P, ctx, stages = self.arcs[i]
            k = len(stages)
            best = None
            for _ in range(12):
                if ctx.maxgap and k > 1:
                    ss = [rng.randrange(N - (k - 1))]
                    for _ in range(k - 1):
                        ss.append(min(N - 1, ss[-1] + rng.randint(1, ctx.maxgap)))
                    if len(set(ss)) < k:
                        continue
                else:
                    ss = sorted(rng.sample(range(N), k))
                    if k > 1 and ss[-1] - ss[0] < min(N - 1, 2 * k):
                        continue
                cost = max(load[s] for s in ss) + 0.01 * rng.random()
                if best is None or cost < best[0]:
                    best = (cost, ss)
            if best is None:
                step = (N - 1) / max(1, k - 1) if k > 1 else 0
                ss = [min(N - 1, round(j * step)) for j in range(k)] if k > 1 else [rng.randrange(N)]
            else:
                ss = best[1]
            ctx.sess = ss
            for j, s in enumerate(ss):
                load[s] += 1
                self.plan_of[s].append((P, ctx, j))
            # a later mention of the topic, answering nothing
            if ctx.echo and ss[-1] < N - 1 and rng.random() < 0.6:
                s = rng.randrange(ss[-1] + 1, N)
                self.plan_of[s].append((P, ctx, "echo"))

    def render(self):
        rng = self.rng
        for sess in self.sessions:
            items = self.plan_of[sess.idx]
            rng.shuffle(items)
            self.opening(sess)
            for k, (P, ctx, j) in enumerate(items):
                if rng.random() < (0.3 if self.kind == "assistant" else 0.45):
                    self.filler(sess)
                t = Talk(self, sess, P)
                if j == "echo":
                    t.say(rng.choice(ctx.echo))
                    if self.kind == "assistant":
                        t.other(asst=rng.choice(USER_ECHO_REPLY), dom=ctx.dom, mood="neu")
                    else:
                        t.react("neu")
                    continue
                if j > 0:
                    t.floor = self.sessions[ctx.sess[j - 1]].date.date()
                if j + 1 < len(ctx.sess):
                    t.limit = self.sessions[ctx.sess[j + 1]].date.date()
                if self.kind == "group" and sess.turns and sess.turns[-1].speaker == P.name and rng.random() < 0.7:
                    sess.add(t.friend(), rng.choice(["anyway what's new with everyone", "ok other news?", f"{P.name} what's up with you",
                                                     "how's everyone's week", "update me on your lives"]))
                ctx.stages[j](t)
            if rng.random() < 0.5:
                self.filler(sess)
            self.closing(sess)
        for sess in self.sessions:
            for k, t in enumerate(sess.turns):
                t.dia_id = f"D{sess.idx + 1}:{k + 1}"

    def opening(self, sess):
        rng = self.rng
        if self.kind == "assistant":
            n = self.people[0].name
            sess.add(n, rng.choice(USER_OPEN))
            sess.add(ASSISTANT, asst_text(rng, "", "gen", "greet", n, 30, 45))
        else:
            a, b = rng.sample(self.people, 2)
            x, y = rng.choice(GRP_OPEN)
            sess.add(a.name, x)
            sess.add(b.name, y)

    def closing(self, sess):
        rng = self.rng
        if self.kind == "assistant":
            n = self.people[0].name
            sess.add(n, rng.choice(USER_CLOSE))
            sess.add(ASSISTANT, asst_text(rng, "", "gen", "bye", n, 30, 45))
        else:
            a, b = rng.sample(self.people, 2)
            x, y = rng.choice(GRP_CLOSE)
            sess.add(a.name, x)
            sess.add(b.name, y)

    def filler(self, sess):
        rng = self.rng
        if self.kind == "assistant":
            used = self.used.setdefault("qa", [])
            xs = [i for i in range(len(ASST_QA)) if i not in used] or list(range(len(ASST_QA)))
            i = rng.choice(xs)
            used.append(i)
            q, a = ASST_QA[i]
            sess.add(self.people[0].name, rng.choice(["", "", "Random question: ", "Unrelated, but ", "Settle something for me: "]) + q)
            sess.add(ASSISTANT, a)
        else:
            used = self.used.setdefault("banter", [])
            xs = [i for i in range(len(GRP_BANTER)) if i not in used] or list(range(len(GRP_BANTER)))
            i = rng.choice(xs)
            used.append(i)
            spk = rng.sample(self.people, len(self.people))
            for k, line in enumerate(GRP_BANTER[i]):
                sess.add(spk[k % len(spk)].name, line)

    def aggregates(self):
        """Multi-hop questions that gather facts of one kind from several sessions, and "which came first" questions."""
        rng = self.rng
        for P in self.people:
            for tag, phr in AGG.items():
                xs = self.tags.get((P.name, tag), [])
                by_sess = {}
                for turn, text in xs:
                    by_sess.setdefault(turn.sess.idx, (turn, text))
                items = [by_sess[s] for s in sorted(by_sess)]
                if len(items) < 2:
                    continue
                for k, q in enumerate(phr):
                    if k == 1 and len(items) < 4:
                        break
                    pick = sorted(rng.sample(items, min(len(items), rng.choice([2, 3]))), key=lambda x: x[0].sess.idx)
                    self.questions.append(dict(category="multi-hop", question=q.format(n=P.name, pos=P.pos), ev=[x[0] for x in pick],
                                               answer="; ".join(x[1] for x in pick) + (" (among others)" if len(pick) < len(items) else ""), owner=P.name))
        # which came first / how long between: pairs of dated events told in different sessions
        pairs = []
        ev = sorted(self.dated, key=lambda e: (e[0], e[3].sess.idx))
        for i in range(len(ev)):
            for j in range(i + 1, len(ev)):
                a, b = ev[i], ev[j]
                if a[3].sess is b[3].sess or abs((b[0] - a[0]).days) < 3:
                    continue
                if self.kind == "group" and a[1] != b[1] and rng.random() < 0.5:
                    continue
                pairs.append((a, b))
        rng.shuffle(pairs)
        for a, b in pairs[:24]:
            x, y = (a, b) if rng.random() < 0.5 else (b, a)
            if rng.random() < 0.75:
                q = rng.choice(["Which came first: {x} or {y}?", "Which happened earlier, {x} or {y}?", "What happened first, {x} or {y}?"]).format(x=x[2], y=y[2])
                ans = f"{a[2]} ({day(a[0])}), before {b[2]} ({day(b[0])})"
            else:
                q = f"How many days passed between {x[2]} and {y[2]}?"
                ans = f"{(b[0] - a[0]).days} days ({day(a[0])} to {day(b[0])})"
            self.questions.append(dict(category="temporal", question=q, ev=[x[3], y[3]], answer=ans, owner=x[1]))


# --------------------------------------------------------------------------------------
# Sampling, output, checks
# --------------------------------------------------------------------------------------

QUOTA = {"single-hop": 95, "multi-hop": 45, "temporal": 40, "open-domain": 24}


def build(seed, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    all_q, convs = [], []
    for c in range(len(CONVS)):
        cv = Conv(c, seed)
        cv.plan()
        cv.render()
        cv.aggregates()
        convs.append(cv)
        with open(os.path.join(out_dir, f"{cv.sid}.jsonl"), "w", encoding="utf-8") as fh:
            for k, sess in enumerate(cv.sessions):
                nxt = cv.sessions[k + 1].date if k + 1 < len(cv.sessions) else None
                for i, t in enumerate(sess.turns):
                    ts = sess.date + dt.timedelta(minutes=i)
                    assert nxt is None or ts < nxt
                    rec = {"type": "dialog", "ts_ms": int(ts.replace(tzinfo=dt.timezone.utc).timestamp() * 1000), "session_id": cv.sid,
                           "speaker": t.speaker, "dia_id": t.dia_id, "text": t.text}
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        seen, qs = set(), []
        for q in cv.questions:
            if q["question"] in seen:
                continue
            seen.add(q["question"])
            ev = []
            for t in q["ev"]:
                if t.dia_id not in ev:
                    ev.append(t.dia_id)
            qs.append(dict(conv=cv.sid, question=q["question"], evidence=ev, category=q["category"], answer=q["answer"]))
        picked = []
        for cat, k in QUOTA.items():
            xs = [q for q in qs if q["category"] == cat]
            picked += xs if len(xs) <= k else cv.rng.sample(xs, k)
        order = {id(q): i for i, q in enumerate(qs)}
        picked.sort(key=lambda q: order[id(q)])
        all_q += picked
    with open(os.path.join(out_dir, "questions.jsonl"), "w", encoding="utf-8") as fh:
        for q in all_q:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    return convs, all_q


WORD = re.compile(r"[^\W_]+")
STOP = set("""a an the of to in on at for with and or but is are was were be been being do does did done has have had having what when where who whom
which why how that this these those it its his her hers their theirs there s he she they them him i my me mine you your yours we our ours us
about from by as into onto than then so if would could should can will may might must not no yes up out more most any some all each every
just very also too own after before during while over under again still now ever much many other another such only same both either
am get got gets let lets like t ll re ve d m""".split())
SUFFIXES = ("ational", "ations", "ation", "nesses", "ness", "ments", "ment", "ingly", "ings", "ing", "edly", "ied", "ies", "ions", "ion",
            "ers", "er", "ed", "es", "ly", "s")


def stem(w):
    """A crude suffix-stripping stem, only for the statistics below (bought/buy stay apart; hike/hiking/hiked meet)."""
    for suf in SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)] + ("y" if suf in ("ied", "ies") else "")
            break
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
        w = w[:-1]
    return w[:-1] if w.endswith("e") and len(w) > 3 else w


def check_and_stats(out_dir, all_q, convs, show, seed):
    recs, by_conv = {}, {}
    for fn in sorted(os.listdir(out_dir)):
        if fn.startswith("conv-") and fn.endswith(".jsonl"):
            conv = fn[:-6]
            with open(os.path.join(out_dir, fn), encoding="utf-8") as fh:
                rows = [json.loads(line) for line in fh]
            ts = [r["ts_ms"] for r in rows]
            if ts != sorted(ts):
                print(f"ERROR: {fn} is not in ts_ms order", file=sys.stderr)
                sys.exit(1)
            by_conv[conv] = rows
            for r in rows:
                recs[(conv, r["dia_id"])] = r
    bad = [(q["conv"], e) for q in all_q for e in q["evidence"] if (q["conv"], e) not in recs]
    if bad:
        print(f"ERROR: {len(bad)} evidence ids do not exist, e.g. {bad[:5]}", file=sys.stderr)
        sys.exit(1)
    one_session = [q["question"] for q in all_q if q["category"] == "multi-hop" and len({e.split(":")[0] for e in q["evidence"]}) < 2]
    if one_session:
        print(f"ERROR: {len(one_session)} multi-hop questions have evidence from one session only, e.g. {one_session[:3]}", file=sys.stderr)
        sys.exit(1)
    # names: the people of each conversation and everyone named in it (a question may share a name with its evidence)
    names = {}
    for cv in convs:
        ns = {p.name.lower() for p in cv.people} | {"assistant", "ai", "chatbot"}
        ns |= {x.lower() for x in SIDE_F + SIDE_M}
        names[cv.sid] = ns
    asst_w, user_w = [], []
    kinds = {"assistant": 0, "group": 0}
    for cv in convs:
        kinds[cv.kind] += 1
    for (c, _), r in recs.items():
        (asst_w if r["speaker"] == ASSISTANT else user_w).append(len(WORD.findall(r["text"])))
    cats = {}
    for q in all_q:
        cats[q["category"]] = cats.get(q["category"], 0) + 1
    verb = other = absent = 0
    no_share = {}
    after_q = 0
    for q in all_q:
        qw = [w for w in WORD.findall(q["question"].lower()) if w not in STOP and w not in names[q["conv"]] and not w.isdigit()]
        ew = set()
        for e in q["evidence"]:
            r = recs[(q["conv"], e)]
            ew |= set(WORD.findall((r["text"] + " " + r["speaker"]).lower()))
        es = {stem(w) for w in ew}
        shared = 0
        for w in qw:
            if w in ew:
                verb += 1
                shared += 1
            elif stem(w) in es:
                other += 1
                shared += 1
            else:
                absent += 1
        c = no_share.setdefault(q["category"], [0, 0])
        c[0] += shared == 0
        c[1] += 1
        # is the (first) evidence turn the reply to someone else's question?
        rows = by_conv[q["conv"]]
        i = next(k for k, r in enumerate(rows) if r["dia_id"] == q["evidence"][0])
        if i > 0 and rows[i - 1]["speaker"] != rows[i]["speaker"] and rows[i - 1]["text"].rstrip().endswith("?") and rows[i - 1]["session_id"] == rows[i]["session_id"]:
            after_q += 1
    tot = verb + other + absent
    per_conv = {c: len(v) for c, v in by_conv.items()}
    nev = [len(q["evidence"]) for q in all_q]
    ns_all = sum(v[0] for v in no_share.values())
    print(f"conversations: {len(per_conv)} ({kinds['assistant']} with an AI assistant, {kinds['group']} group chats), turns: {sum(per_conv.values())} "
          f"({min(per_conv.values())}-{max(per_conv.values())} per conversation)")
    print(f"words per turn: people mean {sum(user_w) / len(user_w):.1f} (min {min(user_w)}, max {max(user_w)}); "
          f"assistant mean {sum(asst_w) / len(asst_w):.1f} (min {min(asst_w)}, max {max(asst_w)})")
    print(f"questions: {len(all_q)} — " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    print(f"evidence turns per question: mean {sum(nev) / len(nev):.2f}, max {max(nev)}; all {sum(nev)} evidence ids exist; "
          f"every multi-hop question's evidence spans 2 or more sessions")
    print(f"question content words (stop words and names aside): {100 * verb / tot:.0f}% verbatim in the evidence turns, "
          f"{100 * other / tot:.0f}% there only in another form, {100 * absent / tot:.0f}% not there")
    print(f"questions sharing no content word with their evidence (names aside): {ns_all} ({100 * ns_all / len(all_q):.0f}%) — "
          + ", ".join(f"{k} {100 * v[0] / v[1]:.0f}%" for k, v in sorted(no_share.items())))
    print(f"questions whose evidence turn answers another speaker's question: {after_q} ({100 * after_q / len(all_q):.0f}%)")
    if show:
        r = random.Random(seed + show)
        for q in r.sample(all_q, min(show, len(all_q))):
            print(f"\n[{q['conv']} {q['category']}] {q['question']}  ->  {q['answer']}")
            for e in q["evidence"]:
                rec = recs[(q["conv"], e)]
                when = dt.datetime.fromtimestamp(rec["ts_ms"] / 1000, dt.timezone.utc)
                print(f"    {e} ({WEEKDAYS[when.weekday()][:3]} {when:%d %b %Y}) {rec['speaker']}: {rec['text']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data-notes"))
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--show", type=int, default=0, help="print N random questions with their evidence turns")
    a = ap.parse_args()
    t0 = time.time()
    convs, all_q = build(a.seed, a.out)
    check_and_stats(a.out, all_q, convs, a.show, a.seed)
    print(f"wrote {a.out} in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
