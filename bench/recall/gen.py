#!/usr/bin/env python3
"""Generate the long-conversation memory benchmark (deterministic, seeded).

Ten conversations between two named speakers, ~25 dated sessions each, ~600 turns
per conversation, and ~2,000 questions with the dialog ids of the turns that hold
their answers. Each conversation is written as a wmreplay log (one `dialog` record a
line); the questions go to questions.jsonl. Python 3 standard library only.

    python3 bench/recall/gen.py                 # writes bench/recall/data/
    python3 bench/recall/gen.py --show 30       # also prints 30 random questions with their evidence

Nothing here knows about any search engine: the facts, the turns that carry them and
the questions about them are written the way people talk and ask, and the engines are
measured afterwards by eval.py.
"""
import argparse
import datetime as dt
import json
import os
import random
import re
import sys
import time

SEED = 20261128
N_CONVS = 10
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
NUM_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]

# --------------------------------------------------------------------------------------
# People
# --------------------------------------------------------------------------------------

PAIRS = [
    (("Maya", "f"), ("Leo", "m")),
    (("Priya", "f"), ("Daniel", "m")),
    (("Sofia", "f"), ("Rosa", "f")),
    (("Hannah", "f"), ("Omar", "m")),
    (("Felix", "m"), ("Arjun", "m")),
    (("Elena", "f"), ("Jamal", "m")),
    (("Nora", "f"), ("Tyler", "m")),
    (("Aisha", "f"), ("Ben", "m")),
    (("Grace", "f"), ("Mateo", "m")),
    (("Ingrid", "f"), ("Kofi", "m")),
]
PRON = {
    "f": dict(sub="she", obj="her", pos="her", refl="herself"),
    "m": dict(sub="he", obj="him", pos="his", refl="himself"),
}
F_NAMES = ["Jess", "Lena", "Rachel", "Tara", "Bea", "Carmen", "Dana", "Fiona", "Gwen", "Holly",
           "Iris", "June", "Kira", "Lucy", "Mira", "Nadia", "Olivia", "Paula", "Ruth", "Stella",
           "Tess", "Vera", "Wendy", "Yara", "Zoe", "Amara", "Bianca", "Celia", "Daphne", "Esme"]
M_NAMES = ["Ethan", "Noah", "Chris", "Mike", "Luis", "Dev", "Sam", "Theo", "Hugo", "Ian",
           "Jonah", "Kai", "Liam", "Miles", "Nico", "Owen", "Pete", "Quinn", "Reid", "Simon",
           "Tomas", "Victor", "Wes", "Yusuf", "Zach", "Andre", "Bruno", "Caleb", "Dmitri", "Emil"]
KID_F = ["Lily", "Ava", "Mia", "Ella", "Nina", "Rosie", "Isla", "Maisie", "Pia", "Thea"]
KID_M = ["Max", "Eli", "Finn", "Leon", "Oscar", "Jude", "Milo", "Rory", "Toby", "Arlo"]
HOME_CITIES = ["Portland", "Denver", "Austin", "Minneapolis", "Pittsburgh", "Sacramento",
               "Raleigh", "Columbus", "Milwaukee", "Tucson", "Boise", "Richmond", "Madison",
               "Albuquerque", "Providence", "Spokane", "Savannah", "Ann Arbor", "Asheville", "Burlington"]

JOBS = [
    dict(title="nurse", art="a", place="St. Mary's Hospital", short="the hospital", promo="charge nurse",
         intro=["Long week at the hospital. Being an ER nurse at {place} never gets easier, but I love my patients.",
                "I just finished three twelve-hour shifts in a row at {place}. Nursing is no joke.",
                "Work has been wild. We were short-staffed in the ER at {place} all week, so I've been covering extra nursing shifts."],
         stories=[("One of my patients, an old fisherman, taught me how to tie a bowline knot during his IV drip {when}.",
                   "What did {S}'s patient teach {obj}?", "how to tie a bowline knot"),
                  ("We had a power outage in the ER {when} and had to chart everything on paper by flashlight.",
                   "What happened in the ER where {S} works?", "a power outage; they charted on paper by flashlight")],
         od=("Would {S} likely know what to do if someone fainted at a party?", "Yes, {sub} is an ER nurse")),
    dict(title="graphic designer", art="a", place="Brightline Studio", short="the studio", promo="art director",
         intro=["I've been buried in work at Brightline. Being a graphic designer sounds glamorous until a client wants the logo bigger for the fifth time.",
                "Design work at {place} has been nonstop. I'm doing the whole visual identity for a new coffee chain.",
                "My job at {place} keeps me busy — I'm the graphic designer on three client projects right now."],
         stories=[("A client picked the logo I made as a joke option {when}. It's a cartoon pineapple wearing sunglasses.",
                   "Which logo did {S}'s client pick?", "the joke option, a cartoon pineapple wearing sunglasses"),
                  ("My poster design for the city jazz festival got printed {when}! It's on every bus stop downtown.",
                   "What did {S} design a poster for?", "the city jazz festival")],
         od=("Would {S} be a good person to ask for help designing a wedding invitation?", "Yes, {sub} is a graphic designer")),
    dict(title="high school chemistry teacher", art="a", place="Jefferson High", short="school", promo="head of the science department",
         intro=["Grading lab reports all weekend. Teaching chemistry to sixteen-year-olds at {place} is a lot, but they're funny kids.",
                "My chemistry students at {place} had their midterm today and I think half of them forgot what a mole is.",
                "Teaching has been intense this term. I have five chemistry classes at {place} and one of them is right after lunch."],
         stories=[("One of my students built a working water filter out of sand and charcoal for the science fair {when}.",
                   "What did one of {S}'s students build for the science fair?", "a water filter out of sand and charcoal"),
                  ("We did the elephant toothpaste experiment in class {when} and foam got all over the ceiling tiles.",
                   "Which experiment made a mess in {S}'s classroom?", "the elephant toothpaste experiment")],
         od=("Would {S} be good at explaining science to teenagers?", "Yes, {sub} teaches high school chemistry")),
    dict(title="software engineer", art="a", place="Routewise", short="work", promo="engineering team lead",
         intro=["Work's been hectic. I'm a software engineer at {place}, a logistics startup, and we're shipping a huge release.",
                "I've been coding nonstop at {place}. Being a software engineer at a startup means everything is urgent.",
                "My team at {place} is rewriting the whole delivery-tracking app, so my days are basically code reviews and coffee."],
         stories=[("I accidentally took down our staging server {when} by running the wrong script. Everyone was nice about it.",
                   "What did {S} accidentally do at work?", "took down the staging server by running the wrong script"),
                  ("Our team won the company hackathon {when} with an app that plans delivery routes around school zones.",
                   "What did {S}'s team build for the hackathon?", "an app that plans delivery routes around school zones")],
         od=("Could {S} probably help a friend set up a website?", "Likely yes, {sub} is a software engineer")),
    dict(title="physical therapist", art="a", place="Northside Sports Clinic", short="the clinic", promo="clinic director",
         intro=["I saw eleven patients at {place} today. Physical therapy is rewarding but my own back hurts from demonstrating exercises.",
                "Work at the clinic is busy. Half my physical therapy patients right now are weekend soccer players with bad knees.",
                "Being a physical therapist at {place} means I spend all day telling people to do their stretches, ha."],
         stories=[("A patient who couldn't walk after his surgery walked into the clinic without crutches {when}. I almost cried.",
                   "What milestone did {S}'s patient reach?", "he walked in without crutches after his surgery"),
                  ("We got a new underwater treadmill at the clinic {when} and everyone wants to try it.",
                   "What new equipment did {S}'s clinic get?", "an underwater treadmill")],
         od=("Would {S} be a good person to ask about recovering from a knee injury?", "Yes, {sub} is a physical therapist")),
    dict(title="line cook", art="a", place="Nonna Lucia", short="the restaurant", promo="sous chef",
         intro=["Friday service at {place} was insane. Being a line cook means my forearms are covered in tiny burns.",
                "I worked a double at the restaurant. We did two hundred covers at {place} and I was on the grill the whole night.",
                "Cooking on the line at {place} is chaos but I love it. Tonight I'm on pasta station."],
         stories=[("A food critic came into the restaurant {when} and ordered my mushroom risotto. She said it was the best thing she ate all month.",
                   "Which of {S}'s dishes did the food critic order?", "the mushroom risotto"),
                  ("Our walk-in fridge broke {when} and we had to move everything into coolers in the middle of service.",
                   "What broke at {S}'s restaurant?", "the walk-in fridge")],
         od=("Would {S} be a good person to ask for a dinner recipe?", "Yes, {sub} cooks professionally")),
    dict(title="accountant", art="an", place="Hale & Porter", short="the office", promo="senior accountant",
         intro=["Tax season is eating me alive. Being an accountant at {place} in March means I basically live at my desk.",
                "Spreadsheets all day. Accounting at {place} is calmer now, but quarter-end is coming.",
                "I'm an accountant, so this time of year I dream in spreadsheets. {Place} has us doing mandatory overtime."],
         stories=[("I found a forty-thousand-dollar error in a client's books {when}. My boss bought the whole team lunch.",
                   "What did {S} find in a client's books?", "a forty-thousand-dollar error"),
                  ("The office switched to a four-day week for the summer {when}, so I have Fridays off now.",
                   "What schedule change happened at {S}'s office?", "a four-day week for the summer, Fridays off")],
         od=("Would {S} be a good person to ask for help with a budget?", "Yes, {sub} is an accountant")),
    dict(title="architect", art="an", place="Fielding Architects", short="the firm", promo="project architect",
         intro=["I've been at the office late every night. Our firm, {place}, is designing a new elementary school and I'm on the architecture team.",
                "Architecture work is all deadlines right now. I'm drawing floor plans for a library renovation at {place}.",
                "Being an architect is mostly meetings and permits, honestly. {Place} just won a bid for a community center."],
         stories=[("The school we designed finally broke ground {when}. I got to wear a hard hat and hold a shovel.",
                   "What project of {S}'s firm broke ground?", "the school they designed"),
                  ("I built a tiny cardboard model of the library with working lights for a client meeting {when}.",
                   "What did {S} build for a client meeting?", "a cardboard model of the library with working lights")],
         od=("Would {S} be interested in a tour of famous buildings?", "Likely yes, {sub} is an architect")),
    dict(title="veterinary technician", art="a", place="Maple Grove Animal Hospital", short="the clinic", promo="lead vet tech",
         intro=["Work at the animal hospital was busy. Being a vet tech at {place} means I get bitten at least once a week, ha.",
                "I held a very angry cat for forty minutes at {place} today. Vet tech life.",
                "My shifts at the animal hospital have been long. I'm a veterinary technician at {place} and we're short one doctor."],
         stories=[("A dog swallowed a whole tennis ball and we had to get it out {when}. He's fine now and wagging.",
                   "What did a dog swallow at {S}'s clinic?", "a whole tennis ball"),
                  ("We delivered seven puppies by C-section at the clinic {when}.",
                   "How many puppies were delivered at {S}'s clinic?", "seven")],
         od=("Would {S} be comfortable pet-sitting a nervous dog?", "Likely yes, {sub} is a vet tech")),
    dict(title="librarian", art="a", place="the Eastside public library", short="the library", promo="branch manager",
         intro=["Storytime at the library was chaos today. Being a librarian at {place} is not as quiet as people think.",
                "I've been running the summer reading program at {place}. Librarian life is mostly wrangling kids and printers.",
                "Work at the library is good. I'm a children's librarian at {place} and we just got a new book budget."],
         stories=[("Someone returned a book to the library {when} that was due in 1987. It had a pressed flower inside.",
                   "What was inside the overdue book returned to {S}'s library?", "a pressed flower"),
                  ("We started a seed library at the branch {when}; people can borrow tomato and basil seeds.",
                   "What new kind of library did {S}'s branch start?", "a seed library")],
         od=("Would {S} enjoy a used bookstore?", "Likely yes, {sub} is a librarian")),
    dict(title="journalist", art="a", place="the Daily Courier", short="the paper", promo="features editor",
         intro=["I've been chasing a story about the city's water bills all week. Reporting for {place} is exhausting.",
                "Deadlines at the paper are brutal. I'm a journalist at {place} and I filed three stories this week.",
                "Being a reporter at {place} means my phone never stops buzzing."],
         stories=[("My article about the closing of the old roller rink made the front page {when}.",
                   "What was {S}'s front-page article about?", "the closing of the old roller rink"),
                  ("I interviewed the mayor {when} and he spilled coffee on my notebook.",
                   "Who did {S} interview?", "the mayor")],
         od=("Would {S} be comfortable interviewing strangers?", "Likely yes, {sub} is a journalist")),
    dict(title="social worker", art="a", place="Harbor Family Services", short="the agency", promo="case supervisor",
         intro=["Work has been heavy. As a social worker at {place}, some weeks just take everything out of you.",
                "I had four home visits today for {place}. Social work is hard but I wouldn't do anything else.",
                "My caseload at {place} went up again. Being a social worker is a lot of paperwork and a lot of heart."],
         stories=[("One of my families finally moved into their own apartment {when}. The kids showed me their new bunk beds.",
                   "What did one of {S}'s families finally get?", "their own apartment"),
                  ("Our agency ran a coat drive {when} and collected over three hundred coats.",
                   "How many coats did {S}'s agency collect?", "over three hundred")],
         od=("Would {S} be a good listener for a friend going through a hard time?", "Likely yes, {sub} is a social worker")),
    dict(title="electrician", art="an", place="Volt Brothers", short="work", promo="master electrician",
         intro=["I rewired a whole old farmhouse this week. Electrician work with {place} is dusty but satisfying.",
                "Long day on the job. I'm an electrician with {place} and we're wiring a new apartment building.",
                "Work's good. Being an electrician means crawling around attics in July, but the pay is decent."],
         stories=[("I found a bird's nest inside a breaker box {when}. We waited for the chicks to fledge before finishing.",
                   "What did {S} find inside a breaker box?", "a bird's nest"),
                  ("I passed my journeyman exam {when} after failing it once.",
                   "Which exam did {S} pass?", "the journeyman exam")],
         od=("Could {S} probably help a friend install a ceiling fan?", "Likely yes, {sub} is an electrician")),
    dict(title="data analyst", art="a", place="Crestline Insurance", short="the office", promo="senior data analyst",
         intro=["I've been staring at dashboards all day. Being a data analyst at {place} is mostly cleaning messy spreadsheets.",
                "Work at {place} is fine. I'm a data analyst, so I spend my days convincing people that correlation isn't causation.",
                "My manager at {place} wants a new report every Monday. Data analyst life."],
         stories=[("My dashboard on hospital wait times got shown to the whole company {when}.",
                   "What was {S}'s dashboard about?", "hospital wait times"),
                  ("I automated a report that used to take two days {when}; now it runs in ten minutes.",
                   "What did {S} automate at work?", "a report that used to take two days")],
         od=("Would {S} be comfortable working with spreadsheets?", "Yes, {sub} is a data analyst")),
    dict(title="pharmacist", art="a", place="Corner Street Pharmacy", short="the pharmacy", promo="pharmacy manager",
         intro=["Flu season means the pharmacy line is out the door. Being a pharmacist at {place} is nonstop right now.",
                "I gave something like sixty flu shots at {place} today. My pharmacist arm is tired, ha.",
                "Work at the pharmacy is busy. I'm the pharmacist on the evening shift at {place}."],
         stories=[("I caught a dangerous drug interaction on a prescription {when} before it went out.",
                   "What did {S} catch on a prescription?", "a dangerous drug interaction"),
                  ("A regular customer brought the whole pharmacy staff homemade tamales {when}.",
                   "What did a regular customer bring to {S}'s pharmacy?", "homemade tamales")],
         od=("Would {S} be a good person to ask about medication side effects?", "Yes, {sub} is a pharmacist")),
]

# --------------------------------------------------------------------------------------
# Outings: activity with a companion, on a day the speaker names relative to the session
# --------------------------------------------------------------------------------------

ACTS = {
    "hiking": dict(
        q=["go hiking", "go on a hike"], noun="hike", outdoor=True,
        places=["Eagle Ridge", "the Cedar Falls loop", "Mount Tabor", "the Blue Hollow trail", "Pine Bluff", "Fox Creek canyon"],
        fact=["{When} {comp} and I hiked {place}. My legs are still sore!",
              "I went on a hike with {comp} {when} — we did {place}, about seven miles round trip.",
              "{When} I finally dragged {comp} out on a hike. We picked {place} because it isn't too steep.",
              "Spent {when} hiking {place} with {comp}. First real hike of the year for me!"],
        placeq=["Where did {S} go hiking with {compq}?", "Which trail did {S} and {compq} hike?"],
        follow=["Was the trail busy?", "How was the view from the top?", "Did you see any wildlife?"],
        detail=[("We spotted {x} near the top, which made the whole climb worth it.", "What animal did {S} spot on {pos} hike with {compq}?",
                 ["a bald eagle", "a family of deer", "a black bear cub, from very far away", "two foxes", "a huge barred owl"]),
                ("{CompShort} packed {x} and we had lunch at the overlook.", "What did {S} and {compq} eat on their hike?",
                 ["peanut butter sandwiches", "cold leftover pizza", "trail mix and oranges", "homemade empanadas"])],
        echo=["I really need to get out on the trails more.", "Ugh, jealous. I haven't been outside properly in weeks."]),
    "kayaking": dict(
        q=["go kayaking"], noun="kayaking trip", outdoor=True,
        places=["Lake Wren", "the Kettle River", "Stillwater Bay", "Heron Lake"],
        fact=["{When} {comp} and I rented kayaks on {place}. It was so peaceful on the water.",
              "I went kayaking with {comp} {when}! We paddled all the way across {place}.",
              "{When} we took the kayaks out on {place}, me and {comp}. I only tipped over once, ha."],
        placeq=["Where did {S} go kayaking with {compq}?", "Which lake or river did {S} and {compq} paddle on?"],
        follow=["Did you fall in?", "Was the water cold?", "Was that your first time kayaking?"],
        detail=[("A {x} swam right up next to my kayak. I nearly screamed.", "What swam up next to {S}'s kayak?",
                 ["otter", "beaver", "huge carp", "family of ducks"]),
                ("My arms were so sore afterward that {CompShort} had to carry the {x} back to the car.", "What did {S}'s {compqshort} have to carry back to the car after kayaking?",
                 ["paddles", "cooler", "life jackets"])],
        echo=["I've never been kayaking, it looks terrifying and fun.", "Being on the water sounds so relaxing right now."]),
    "camping": dict(
        q=["go camping"], noun="camping trip", outdoor=True, when=["weekend", "week", "fewweeks"],
        places=["Silver Lake State Park", "the Redwood Hollow campground", "Bear Creek", "Juniper Flats"],
        fact=["{When} {comp} and I went camping at {place}. Two nights in a tent!",
              "We camped at {place} {when} — me and {comp}. I forgot how much I love sleeping outside.",
              "I just got back from a camping trip with {comp}. We were at {place} {when} and it rained the whole first night."],
        placeq=["Where did {S} go camping with {compq}?", "Which campground did {S} and {compq} stay at?"],
        follow=["Did you make s'mores?", "Was it cold at night?", "How did you sleep in the tent?"],
        detail=[("We roasted {x} over the fire and told ghost stories until midnight.", "What did {S} and {compq} roast over the campfire?",
                 ["marshmallows", "hot dogs", "sweet potatoes wrapped in foil", "corn on the cob"]),
                ("A {x} got into our cooler in the middle of the night and ate all the bacon.", "What got into {S}'s cooler while camping?",
                 ["raccoon", "family of raccoons", "very bold squirrel"])],
        echo=["Camping is my idea of fun too, as long as there's a real bathroom.", "I haven't slept in a tent since I was a kid."]),
    "climbing": dict(
        q=["go rock climbing", "go climbing"], noun="climbing session", outdoor=True,
        places=["the Granite Wall crag", "Devil's Staircase", "the quarry cliffs", "Summit Boulders"],
        fact=["{When} {comp} and I went rock climbing at {place}. My forearms are destroyed.",
              "I climbed my first real outdoor route {when} at {place}! {Comp} was belaying me.",
              "Went climbing at {place} with {comp} {when}. I was so scared at the top but I did it."],
        placeq=["Where did {S} go rock climbing with {compq}?", "Where did {S} climb with {compq}?"],
        follow=["Were you scared?", "How high did you get?", "Is that a hard route?"],
        detail=[("I made it up a {x} route, which is the hardest one I've ever finished.", "What grade of route did {S} finish while climbing with {compq}?",
                 ["5.9", "5.10a", "V3"]),
                ("I scraped my {x} pretty badly on the way down, but it was worth it.", "What did {S} scrape while climbing?",
                 ["knee", "elbow", "knuckles"])],
        echo=["You're braver than me. I get dizzy on a ladder.", "Rock climbing always looks so cool."]),
    "fishing": dict(
        q=["go fishing"], noun="fishing trip", outdoor=True,
        places=["Miller Pond", "the Snake River", "Lake Pinecrest", "the pier at Harbor Point"],
        fact=["{When} I went fishing with {comp} at {place}. We were out before sunrise.",
              "{Comp} took me fishing at {place} {when}. I haven't fished since I was twelve!",
              "Spent {when} fishing off {place} with {comp}. Very relaxing, very few fish."],
        placeq=["Where did {S} go fishing with {compq}?"],
        follow=["Did you catch anything?", "Do you actually like fishing?", "Was it cold out on the water?"],
        detail=[("I caught a {x}! We let it go after a quick photo.", "What fish did {S} catch while fishing with {compq}?",
                 ["rainbow trout", "largemouth bass", "catfish", "walleye"]),
                ("{CompShort} lost {x} in the water, which was the highlight of the day, honestly.", "What did {S}'s {compqshort} lose in the water?",
                 ["a brand-new reel", "their sunglasses", "a whole tackle box"])],
        echo=["I don't have the patience for fishing.", "That sounds like the perfect quiet morning."]),
    "biking": dict(
        q=["go biking", "go on a bike ride"], noun="bike ride", outdoor=True,
        places=["the river trail", "the old rail trail", "the lakeshore path", "the vineyard loop"],
        fact=["{When} {comp} and I biked {place}. Almost thirty miles!",
              "I went on a long bike ride with {comp} {when}, all along {place}.",
              "{When} we rode bikes on {place}, me and {comp}. I need a softer seat."],
        placeq=["Where did {S} ride bikes with {compq}?", "Which trail did {S} bike with {compq}?"],
        follow=["How far did you ride?", "Did you rent bikes?", "Was it hilly?"],
        detail=[("We stopped halfway at a little stand selling {x}.", "What did {S} and {compq} stop for during their bike ride?",
                 ["fresh peach lemonade", "homemade donuts", "sweet corn", "ice cream sandwiches"]),
                ("I got a flat tire near the end and {CompShort} had to patch it with {x}.", "How did {S}'s flat tire get fixed?",
                 ["a kit from a stranger", "duct tape", "a spare tube"])],
        echo=["I haven't been on a bike in years.", "Cycling is such a good way to see a place."]),
    "picnic": dict(
        q=["have a picnic", "go on a picnic"], noun="picnic", outdoor=True,
        places=["Laurelhurst Park", "the rose garden", "Riverside Park", "the botanical gardens"],
        fact=["{When} {comp} and I had a picnic at {place}. Blanket, cheese, the whole thing.",
              "We went on a picnic at {place} {when}, me and {comp}. The weather was perfect.",
              "{Comp} surprised me with a picnic at {place} {when}."],
        placeq=["Where did {S} have a picnic with {compq}?"],
        follow=["What did you bring?", "Was it crowded?", "That's adorable, whose idea was it?"],
        detail=[("We brought {x}, and a bunch of ants found it before we did.", "What food did {S} and {compq} bring on their picnic?",
                 ["a huge fruit salad", "fried chicken and coleslaw", "a baguette and three kinds of cheese", "cucumber sandwiches"]),
                ("Some guy was flying a {x} nearby and it crashed right onto our blanket.", "What crashed onto {S}'s picnic blanket?",
                 ["drone", "kite", "frisbee"])],
        echo=["A picnic sounds so nice right now.", "I love a good park day."]),
    "beach": dict(
        q=["go to the beach"], noun="beach day", outdoor=True,
        places=["Cannon Beach", "Sandpiper Cove", "Crescent Beach", "Driftwood Bay"],
        fact=["{When} {comp} and I drove out to {place} for a beach day. I'm still finding sand everywhere.",
              "We spent {when} at {place}, me and {comp}. Sun, waves, sunburn.",
              "I went to the beach with {comp} {when}. {Place} was freezing but gorgeous."],
        placeq=["Which beach did {S} visit with {compq}?", "Where did {S} and {compq} spend their beach day?"],
        follow=["Did you swim?", "Was the water warm?", "Did you get burned?"],
        detail=[("We built a sandcastle shaped like {x} and a little kid asked to take a picture with it.", "What shape was the sandcastle {S} built with {compq}?",
                 ["a dragon", "a turtle", "the Eiffel Tower", "a giant octopus"]),
                ("I found a {x} in a tide pool, which was the best part.", "What did {S} find in a tide pool?",
                 ["purple starfish", "sand dollar", "hermit crab"])],
        echo=["I miss the ocean so much.", "Beach days are the best days."]),
    "museum": dict(
        q=["go to the art museum", "visit the art museum"], noun="museum visit", outdoor=False,
        places=["the Hartwell Museum of Art", "the city art museum", "the Modern Gallery", "the Castellan Museum"],
        fact=["{When} {comp} and I went to {place}. They have a new impressionist exhibit.",
              "I visited {place} with {comp} {when}. We spent four hours there!",
              "{Comp} and I checked out the art museum {when}. {Place} is free on the first Sunday."],
        placeq=["Which museum did {S} visit with {compq}?"],
        follow=["What was the best piece?", "Was it crowded?", "Did you like the exhibit?"],
        detail=[("My favorite was {x}. I just stood there for ages.", "Which piece did {S} like most at the museum?",
                 ["a huge painting of a stormy harbor", "a room full of glass sculptures", "a tiny Dutch portrait of a girl with a bird"]),
                ("We did the museum's {x} workshop afterward and made terrible art, ha.", "What workshop did {S} do at the museum?",
                 ["printmaking", "watercolor", "collage"])],
        echo=["I always mean to go to museums more.", "That sounds like a lovely slow day."]),
    "concert": dict(
        q=["go to a concert", "see a concert"], noun="concert", outdoor=False,
        places=["Velvet Static", "Marigold Avenue", "Paper Lanterns", "Northbound Owls", "Lucy Arden", "Copper Saints"],
        fact=["{When} {comp} and I saw {place} live! I lost my voice from singing along.",
              "I went to a {place} concert with {comp} {when}. Best show I've been to in years.",
              "{Comp} got us tickets to see {place} {when}. We were in the third row!"],
        placeq=["Which band did {S} see in concert with {compq}?", "Who did {S} and {compq} see live?"],
        follow=["Did they play your favorite song?", "Was it loud?", "Where were your seats?"],
        detail=[("They closed with {x} and the whole crowd was singing.", "What song did the band close with at {S}'s concert?",
                 ["'Harbor Lights'", "'Paper Moon Parade'", "'Slow Burn'", "'Northern Line'"]),
                ("I bought a {x} at the merch table even though it cost way too much.", "What did {S} buy at the concert merch table?",
                 ["tour poster", "vintage-style t-shirt", "signed vinyl record"])],
        echo=["I haven't been to a concert since before the pandemic.", "Live music is the best."]),
    "market": dict(
        q=["go to the farmers market"], noun="farmers market trip", outdoor=True,
        places=["the Saturday market downtown", "the Hillside farmers market", "the market by the river"],
        fact=["{When} {comp} and I went to {place}. I spent way too much on tomatoes.",
              "I took {comp} to the farmers' market {when} — {place} is so big now.",
              "{When} we walked around {place}, me and {comp}, just tasting everything."],
        placeq=["Which market did {S} go to with {compq}?"],
        follow=["What did you buy?", "Was it busy?", "Did you try anything new?"],
        detail=[("We bought {x} and I'm going to attempt a pie.", "What did {S} buy at the farmers market?",
                 ["a whole flat of strawberries", "ten pounds of rhubarb", "a bag of sour cherries"]),
                ("There was a man selling {x} and {CompShort} bought three.", "What did {S}'s {compqshort} buy three of at the market?",
                 ["hand-carved wooden spoons", "jars of lavender honey", "potted herbs"])],
        echo=["I love farmers' markets, everything tastes better.", "I should go this weekend."]),
    "skating": dict(
        q=["go ice skating"], noun="ice skating outing", outdoor=False,
        places=["the rink at Centennial Park", "the frozen pond behind the library", "the Glacier Ice Arena"],
        fact=["{When} {comp} and I went ice skating at {place}. I fell exactly four times.",
              "I went skating with {comp} {when} at {place}! Haven't been on skates in ten years.",
              "{When} {comp} talked me into ice skating at {place}."],
        placeq=["Where did {S} go ice skating with {compq}?"],
        follow=["Did you fall?", "Was it crowded?", "Are you any good at it?"],
        detail=[("Afterward we warmed up with {x} at a little stand by the rink.", "What did {S} and {compq} have after ice skating?",
                 ["hot chocolate with marshmallows", "spiced cider", "soft pretzels"]),
                ("A little girl skated circles around us and gave me tips on {x}.", "What did a little girl give {S} tips on while skating?",
                 ["stopping", "skating backwards", "keeping my knees bent"])],
        echo=["I'm hopeless on ice.", "Skating sounds fun, as long as nobody films me."]),
    "volunteering": dict(
        q=["volunteer at the food bank"], noun="volunteer shift", outdoor=False,
        places=["the Westside food bank", "the community food pantry", "the Second Harvest warehouse"],
        fact=["{When} {comp} and I volunteered at {place}. We packed something like four hundred boxes.",
              "I spent {when} volunteering at {place} with {comp}.",
              "{Comp} and I did a volunteer shift at {place} {when}. It felt really good."],
        placeq=["Where did {S} volunteer with {compq}?"],
        follow=["What did you do there?", "Do you go often?", "That's so nice, how did it go?"],
        detail=[("I was on {x} duty the whole shift.", "What job did {S} do during {pos} volunteer shift?",
                 ["canned goods sorting", "produce bagging", "check-in desk"]),
                ("The coordinator said the boxes we packed would feed about {x} families.", "How many families would the boxes {S} packed feed?",
                 ["two hundred", "three hundred", "one hundred and fifty"])],
        echo=["I keep saying I'll start volunteering.", "That's such a good way to spend a day."]),
    "bowling": dict(
        q=["go bowling"], noun="bowling night", outdoor=False,
        places=["Starlite Lanes", "Galaxy Bowl", "the old alley on Fifth Street"],
        fact=["{When} {comp} and I went bowling at {place}. I bowled a 143!",
              "I went bowling with {comp} {when} at {place}. Retro shoes and everything.",
              "{When} we did bowling night at {place}, me and {comp}."],
        placeq=["Where did {S} go bowling with {compq}?"],
        follow=["Who won?", "What was your score?", "Is that place still open? I thought it closed."],
        detail=[("{CompShort} won by {x} pins and will not stop talking about it.", "By how many pins did {S}'s {compqshort} win at bowling?",
                 ["two", "eleven", "thirty"]),
                ("They had {x} night, so the lanes were glowing.", "What theme night was it at the bowling alley?",
                 ["cosmic", "eighties", "blacklight"])],
        echo=["I'm the worst bowler alive.", "Bowling is so underrated."]),
    "applepicking": dict(
        q=["go apple picking"], noun="apple picking trip", outdoor=True,
        places=["Hillcrest Orchard", "Miller's Farm", "Red Barn Orchard"],
        fact=["{When} {comp} and I went apple picking at {place}. We came home with way too many apples.",
              "I took {comp} apple picking {when}! {Place} has the best cider donuts.",
              "{When} we picked apples at {place}, me and {comp}."],
        placeq=["Where did {S} go apple picking with {compq}?"],
        follow=["How many did you pick?", "What are you going to make?", "Did you get cider donuts?"],
        detail=[("We picked about {x} pounds, so I'm making applesauce all week.", "How many pounds of apples did {S} pick?",
                 ["twenty", "fifteen", "thirty"]),
                ("Our favorite were the {x} apples, super crisp.", "What kind of apples did {S} like best at the orchard?",
                 ["Honeycrisp", "Macoun", "Pink Lady"])],
        echo=["Apple picking is the most autumn thing ever.", "I love fall stuff like that."]),
    "escaperoom": dict(
        q=["do an escape room"], noun="escape room", outdoor=False,
        places=["Lockbox", "Puzzle Vault", "Great Escape downtown"],
        fact=["{When} {comp} and I did an escape room at {place}. We got out with two minutes left!",
              "I did an escape room with {comp} {when}. {Place} has a new pirate-themed one.",
              "{When} {comp} talked me into an escape room at {place}."],
        placeq=["Where did {S} do an escape room with {compq}?"],
        follow=["Did you get out?", "What was the theme?", "Were the puzzles hard?"],
        detail=[("The theme was {x} and the last puzzle was a locked music box.", "What was the theme of the escape room {S} did?",
                 ["a haunted lighthouse", "a submarine", "a Victorian detective's study"]),
                ("{CompShort} solved the {x} puzzle in like ten seconds.", "Which puzzle did {S}'s {compqshort} solve quickly in the escape room?",
                 ["map", "cipher", "color code"])],
        echo=["Escape rooms stress me out but I love them.", "I've always wanted to try one."]),
}

# --------------------------------------------------------------------------------------
# Other pools
# --------------------------------------------------------------------------------------

PETS = [
    dict(species="dog", kinds=["golden retriever", "beagle", "border collie", "corgi", "lab mix", "dachshund", "greyhound", "husky mix"], young="puppy"),
    dict(species="cat", kinds=["tabby", "Maine Coon", "black cat", "Siamese", "calico"], young="kitten"),
    dict(species="rabbit", kinds=["lop-eared rabbit", "Holland lop", "Rex rabbit"], young="bunny"),
    dict(species="parrot", kinds=["African grey", "cockatiel", "green-cheeked conure"], young="bird"),
    dict(species="guinea pig", kinds=["guinea pig"], young="guinea pig"),
    dict(species="tortoise", kinds=["Russian tortoise", "Hermann's tortoise"], young="tortoise"),
]
PET_NAMES = ["Biscuit", "Juniper", "Pepper", "Mochi", "Waffles", "Olive", "Ziggy", "Clementine", "Bruno",
             "Pickles", "Nova", "Rusty", "Maple", "Tofu", "Chester", "Pudding", "Scout", "Hazel", "Otis",
             "Noodle", "Sprocket", "Fig", "Bean", "Marbles", "Ginger", "Dot", "Wally", "Peanut", "Cosmo", "Bramble"]
PET_ANEC = [
    ("{pet} chewed up my {x} {when}. I can't even be mad, look at that face.", "What did {pet} chew up?",
     ["favorite sneakers", "new headphones", "passport holder", "TV remote"], ["dog", "rabbit", "guinea pig"]),
    ("I had to take {pet} to the vet {when} because {x}.", "Why did {S} take {pet} to the vet?",
     ["{psub} ate half a sock", "{psub} was limping on {ppos} front paw", "{psub} stopped eating for two days", "{psub} had an ear infection"], None),
    ("{pet} learned to {x}! It took us three weeks of treats.", "What trick did {S} teach {pet}?",
     ["ring a bell when {psub} wants to go out", "high-five", "spin in a circle on command", "play dead"], ["dog", "parrot", "rabbit"]),
    ("{pet} knocked {x} off the counter {when} and then just stared at me.", "What did {pet} knock off the counter?",
     ["a full glass of orange juice", "my birthday cake", "a potted cactus"], ["cat"]),
    ("{pet} has started saying '{x}' every time the doorbell rings.", "What does {pet} say when the doorbell rings?",
     ["hello, pizza", "who's there", "come in, come in"], ["parrot"]),
    ("We built {pet} a {x} out of old cardboard boxes {when} and {psub} loves it.", "What did {S} build for {pet}?",
     ["little castle", "maze with three tunnels", "two-story hideout"], ["guinea pig", "rabbit", "cat", "tortoise"]),
]
BOOK_ADJ = ["Salt", "Glass", "Quiet", "Lantern", "Copper", "Winter", "Hollow", "Paper", "Iron", "Velvet", "Midnight", "Amber", "Silent", "Lost"]
BOOK_NOUN = ["Orchard", "Harbor", "Cartographer", "Lighthouse", "Garden", "Kingdom", "Archive", "River", "Atlas", "Daughter", "Engine", "Clockmaker", "Tide", "Sparrow"]
AUTH_F = ["Helena", "Marguerite", "Oona", "Rosalind", "Imogen", "Priscilla", "Beatrix", "Adele"]
AUTH_L = ["Marsh", "Quill", "Harrow", "Ellison", "Vance", "Okafor", "Lindqvist", "Moreau", "Castell", "Whitby", "Adeyemi", "Kowalski"]
GENRES = [
    ("mystery", ["a detective who can't remember her own past", "a murder on an island ferry", "a stolen painting and a retired forger"]),
    ("science fiction", ["a colony ship that wakes up a thousand years early", "a woman who can hear radio signals from the future", "the last gardener on Mars"]),
    ("memoir", ["growing up above a laundromat in Queens", "a chef who lost her sense of taste", "walking the whole Appalachian Trail after a divorce"]),
    ("fantasy", ["a girl who maps cities that don't exist yet", "a kingdom where winter never ended", "dragons that live in old libraries"]),
    ("historical novel", ["two sisters running a bakery in wartime Paris", "lighthouse keepers in 1890s Maine", "a printer's apprentice in Renaissance Venice"]),
    ("thriller", ["a hacker who finds her own obituary online", "a snowed-in ski lodge and a missing guest", "a ferry captain blackmailed by a stranger"]),
    ("self-help book", ["building habits in tiny steps", "saying no without guilt", "getting through burnout"]),
    ("poetry collection", ["the seasons on a family farm", "grief and small daily joys", "growing up between two languages"]),
]
CITIES = [
    dict(city="Lisbon", country="Portugal", cont="Europe", food=["pastéis de nata", "grilled sardines"], sight=["the Belém tower", "the yellow trams"]),
    dict(city="Kyoto", country="Japan", cont="Asia", food=["matcha everything", "a twelve-course kaiseki dinner"], sight=["the bamboo forest", "Fushimi Inari's red gates"]),
    dict(city="Mexico City", country="Mexico", cont="North America", food=["tacos al pastor", "churros with hot chocolate"], sight=["Frida Kahlo's blue house", "the pyramids at Teotihuacan"]),
    dict(city="Reykjavik", country="Iceland", cont="Europe", food=["fermented shark, never again", "lamb soup"], sight=["the northern lights", "a black sand beach"]),
    dict(city="Barcelona", country="Spain", cont="Europe", food=["seafood paella", "patatas bravas"], sight=["the Sagrada Família", "Park Güell"]),
    dict(city="Vancouver", country="Canada", cont="North America", food=["salmon candy", "Japadog hot dogs"], sight=["Stanley Park", "the Capilano suspension bridge"]),
    dict(city="Marrakech", country="Morocco", cont="Africa", food=["lamb tagine", "mint tea everywhere"], sight=["the Jemaa el-Fnaa square", "the Majorelle Garden"]),
    dict(city="Prague", country="the Czech Republic", cont="Europe", food=["trdelník", "goulash in a bread bowl"], sight=["the astronomical clock", "Charles Bridge at sunrise"]),
    dict(city="Buenos Aires", country="Argentina", cont="South America", food=["steak and chimichurri", "dulce de leche ice cream"], sight=["a tango show in San Telmo", "the colorful houses in La Boca"]),
    dict(city="Seoul", country="South Korea", cont="Asia", food=["Korean barbecue", "spicy rice cakes from a street stall"], sight=["Gyeongbokgung palace", "the night markets"]),
    dict(city="Dublin", country="Ireland", cont="Europe", food=["a proper Irish stew", "fish and chips by the harbor"], sight=["the old library at Trinity College", "the cliffs at Howth"]),
    dict(city="Cape Town", country="South Africa", cont="Africa", food=["bobotie", "fresh oysters"], sight=["Table Mountain", "the penguins at Boulders Beach"]),
    dict(city="Hanoi", country="Vietnam", cont="Asia", food=["pho for breakfast every day", "egg coffee"], sight=["Hoan Kiem Lake", "the train street"]),
    dict(city="Edinburgh", country="Scotland", cont="Europe", food=["haggis, which was actually good", "shortbread"], sight=["the castle", "Arthur's Seat"]),
    dict(city="Montreal", country="Canada", cont="North America", food=["poutine", "bagels from a wood oven"], sight=["Old Montreal", "the Botanical Garden"]),
    dict(city="Athens", country="Greece", cont="Europe", food=["souvlaki", "loukoumades"], sight=["the Acropolis", "the old Plaka neighborhood"]),
    dict(city="Sydney", country="Australia", cont="Australia", food=["meat pies", "flat whites"], sight=["the Opera House", "the coastal walk from Bondi"]),
    dict(city="Lima", country="Peru", cont="South America", food=["ceviche", "lomo saltado"], sight=["the cliffs of Miraflores", "the catacombs"]),
]
DISHES = [("lasagna", "my grandma's recipe"), ("chicken tikka masala", "from scratch, even the spice blend"), ("a whole roast turkey", "my first time"),
          ("homemade ramen", "broth simmered for twelve hours"), ("beef bourguignon", "Julia Child style"), ("vegan chili", "three kinds of beans"),
          ("paella", "in a pan I borrowed"), ("dumplings", "about eighty of them"), ("a lemon meringue pie", "the meringue actually held"),
          ("shakshuka", "with feta and lots of cumin"), ("mushroom risotto", "stirring for forty minutes"), ("fish tacos", "with a mango salsa")]
OCCASIONS = ["my parents' anniversary", "a friend's birthday", "our neighborhood potluck", "Thanksgiving", "my book club",
             "the work holiday party", "a first date at home", "a friend's baby shower"]
CUISINES = [("Ethiopian", "Blue Nile"), ("Thai", "Lotus Garden"), ("Peruvian", "Inca Table"), ("Korean", "Seoul Kitchen"),
            ("Lebanese", "Cedar House"), ("Vietnamese", "Pho Saigon"), ("Georgian", "Tbilisi Bakery"), ("Oaxacan", "La Cocina Roja"),
            ("Sichuan", "Red Lantern"), ("Greek", "Olive & Fig")]
COMFORT = ["mac and cheese", "my mom's chicken soup", "spicy ramen", "grilled cheese with tomato soup", "dal and rice",
           "pierogi", "pho", "arroz con pollo", "banana bread", "pad see ew"]
HOBBIES = [
    dict(h="pottery", cls="a pottery class", where="the community arts center", art=["a lopsided mug", "a set of four bowls", "a vase with a blue glaze"],
         q="What did {S} make in {pos} pottery class?"),
    dict(h="watercolor", cls="a watercolor painting class", where="the library's art room", art=["a painting of the lake at sunset", "a portrait of my grandmother", "a little series of birds"],
         q="What did {S} paint in {pos} watercolor class?"),
    dict(h="woodworking", cls="a woodworking course", where="a maker space downtown", art=["a bookshelf", "a cutting board shaped like a fish", "a small step stool"],
         q="What did {S} build in {pos} woodworking course?"),
    dict(h="salsa dancing", cls="salsa dance lessons", where="a studio near my apartment", art=["our first full routine", "a spin without falling over"],
         q="What did {S} accomplish in {pos} salsa lessons?"),
    dict(h="knitting", cls="a knitting group", where="the yarn shop on Elm Street", art=["a scarf", "a tiny sweater for my niece", "a very crooked hat"],
         q="What did {S} knit?"),
    dict(h="photography", cls="a photography workshop", where="the camera shop", art=["a photo of fog on the river that got into a local show", "a whole roll of film of street musicians"],
         q="What photo project did {S} finish?"),
    dict(h="baking bread", cls="a sourdough baking class", where="a bakery that runs classes", art=["my first sourdough loaf with a real ear", "cinnamon rolls from scratch"],
         q="What did {S} bake after {pos} sourdough class?"),
    dict(h="improv", cls="an improv comedy class", where="a little theater downtown", art=["our first student show", "a whole scene as a talking refrigerator"],
         q="What did {S} do in {pos} improv class?"),
]
INSTRUMENTS = ["guitar", "ukulele", "piano", "cello", "violin", "drums", "saxophone", "banjo"]
INJURIES = [
    dict(hurt="sprained my ankle", part="ankle", q="sprain {pos} ankle", noun="sprained ankle",
         cause=["stepping off a curb wrong", "playing pickup basketball", "missing the last stair"]),
    dict(hurt="threw out my back", part="back", q="hurt {pos} back", noun="back injury",
         cause=["moving a couch for a friend", "picking up a bag of soil wrong", "sneezing, of all things"]),
    dict(hurt="broke my wrist", part="wrist", q="break {pos} wrist", noun="broken wrist",
         cause=["falling off my bike", "slipping on ice in the parking lot", "tripping over the dog's leash"]),
    dict(hurt="pulled a hamstring", part="hamstring", q="pull {pos} hamstring", noun="pulled hamstring",
         cause=["sprinting for the bus", "playing soccer with my coworkers", "doing a yoga pose I had no business trying"]),
    dict(hurt="tore something in my knee", part="knee", q="injure {pos} knee", noun="knee injury",
         cause=["skiing", "a bad landing in volleyball", "kneeling on tile all day for a project"]),
]
RECOVER = ["physical therapy twice a week", "a lot of ice and a boring amount of rest", "swimming instead of running",
           "a brace and a very patient physical therapist", "yoga and stretching every morning"]
ILLNESS = [("came down with the flu", "the flu"), ("had a nasty sinus infection", "a sinus infection"), ("caught COVID", "COVID"),
           ("had a migraine that lasted three days", "a migraine"), ("got food poisoning from gas-station sushi", "food poisoning")]
CHECKUP = [("my blood pressure is a little high", "cutting back on salt and walking every evening", "Why is {S} cutting back on salt?"),
           ("my vitamin D is really low", "taking supplements and sitting in the sun at lunch", "Why is {S} taking supplements?"),
           ("my cholesterol is up", "eating oatmeal every morning and less red meat", "Why has {S} changed {pos} breakfast?"),
           ("I need glasses for reading", "wearing these giant tortoiseshell frames", "Why did {S} get glasses?")]
GIFTS = ["a framed photo book of the grandkids", "a pottery class for two", "a new e-reader loaded with mysteries",
         "a cashmere scarf", "tickets to the symphony", "a custom star map of the night she was born"]
BANDS_TV = ["a baking competition show", "a Danish crime drama", "a documentary about octopuses", "an old sitcom from the nineties",
            "a reality show about tiny houses", "a spy thriller series"]


def fmt_date(d):
    return f"{d.day} {d.strftime('%B')} {d.year}"


_USED = {}


def fresh(rng, pool):
    """A choice from pool, among the items used least so far in this conversation (people repeat
    themselves, but not every other minute)."""
    m = min(_USED.get(x, 0) for x in pool)
    x = rng.choice([x for x in pool if _USED.get(x, 0) == m])
    _USED[x] = _USED.get(x, 0) + 1
    return x


def a_an(w):
    vowel = w[:1].lower() in "aeiou" or w.startswith("8") or w.startswith(("11-", "18-"))
    return ("an " if vowel else "a ") + w


def cap(s):
    return s[:1].upper() + s[1:] if s else s


def poss(name):
    return name + "'s"


# --------------------------------------------------------------------------------------
# Relative dates: what a speaker says, and what date it means
# --------------------------------------------------------------------------------------

def rel_past(rng, d, kinds=None):
    """(phrase, answer) for something that happened before session date d."""
    kinds = kinds or ["yesterday", "weekday", "weekend", "days", "week", "morning", "month", "fewweeks"]
    weights = {"yesterday": 4, "weekday": 5, "weekend": 4, "days": 2, "week": 3, "morning": 1, "month": 1, "fewweeks": 1}
    k = rng.choices(kinds, weights=[weights[x] for x in kinds])[0]
    D = fmt_date(d)
    if k == "yesterday":
        return "yesterday", fmt_date(d - dt.timedelta(days=1))
    if k == "days":
        n = rng.choice([2, 3])
        return f"{NUM_WORDS[n]} days ago", fmt_date(d - dt.timedelta(days=n))
    if k == "weekday":
        w = rng.randrange(7)
        delta = (d.weekday() - w) % 7
        if delta < 2:
            delta += 7
        day = d - dt.timedelta(days=delta)
        phrase = rng.choice([f"last {WEEKDAYS[w]}", f"this past {WEEKDAYS[w]}", f"on {WEEKDAYS[w]}"]) if delta <= 6 else f"last {WEEKDAYS[w]}"
        return phrase, f"{fmt_date(day)} (the {WEEKDAYS[w]} before {D})"
    if k == "weekend":
        return rng.choice(["last weekend", "this past weekend", "over the weekend"]), f"the weekend before {D}"
    if k == "week":
        return "last week", f"the week before {D}"
    if k == "morning":
        return "this morning", D
    if k == "month":
        prev = (d.replace(day=1) - dt.timedelta(days=1))
        return "last month", f"{prev.strftime('%B')} {prev.year}"
    return rng.choice(["a couple of weeks ago", "two weeks ago"]), f"about two weeks before {D}"


def fill(t, **kw):
    """Fill a template; {When} and {Comp} are the capitalised forms of {when} and {comp}."""
    for k in list(kw):
        if isinstance(kw[k], str):
            kw.setdefault(cap(k), cap(kw[k]))
    return t.format(**kw)


# --------------------------------------------------------------------------------------
# Personas
# --------------------------------------------------------------------------------------

class Persona:
    def __init__(self, rng, name, g, used, city):
        self.name, self.g = name, g
        self.p = PRON[g]
        self.city = city

        def pick(pool):
            x = rng.choice([n for n in pool if n not in used])
            used.add(x)
            return x
        sib_rel = rng.choice(["sister", "brother"])
        self.sib = dict(rel=sib_rel, name=pick(F_NAMES if sib_rel == "sister" else M_NAMES), g="f" if sib_rel == "sister" else "m")
        self.parent = rng.choice(["mom", "dad"])
        self.partner = None
        if rng.random() < 0.6:
            pg = rng.choice(["f", "m"]) if rng.random() < 0.25 else ("m" if g == "f" else "f")
            rel = rng.choice(["husband" if pg == "m" else "wife", "boyfriend" if pg == "m" else "girlfriend", "partner"])
            self.partner = dict(rel=rel, name=pick(F_NAMES if pg == "f" else M_NAMES), g=pg)
        self.kids = []
        if self.partner and rng.random() < 0.55:
            for _ in range(rng.choice([1, 2])):
                kg = rng.choice(["f", "m"])
                self.kids.append(dict(name=pick(KID_F if kg == "f" else KID_M), g=kg, rel="daughter" if kg == "f" else "son",
                                      age=rng.randint(4, 12)))
        self.friend = pick(F_NAMES if rng.random() < 0.5 else M_NAMES)
        self.coworker = pick(F_NAMES if rng.random() < 0.5 else M_NAMES)

    def companions(self, rng):
        """(key, evidence phrase, short form, question phrase with pronoun, short question phrase)."""
        p = self.p["pos"]
        s = self.sib
        out = [("sib", f"my {s['rel']} {s['name']}", s["name"], f"{p} {s['rel']}", s["rel"]),
               ("parent", f"my {self.parent}", cap(self.parent), f"{p} {self.parent}", self.parent),
               ("friend", f"my friend {self.friend}", self.friend, f"{p} friend {self.friend}", "friend"),
               ("cowork", rng.choice(["a few people from work", "my coworkers"]), "my coworker " + self.coworker,
                f"{p} coworkers", "coworker")]
        if self.partner:
            r = self.partner
            out.append(("partner", f"my {r['rel']} {r['name']}", r["name"], f"{p} {r['rel']}", r["rel"]))
        if self.kids:
            kq = "kids" if len(self.kids) > 1 else self.kids[0]["rel"]
            kev = "the kids" if len(self.kids) > 1 else f"my {self.kids[0]['rel']} {self.kids[0]['name']}"
            out.append(("kids", kev, "the kids" if len(self.kids) > 1 else self.kids[0]["name"],
                        f"{p} {kq}" if len(self.kids) == 1 else f"{p} {rng.choice(['kids', 'children'])}", kq))
        return out


# --------------------------------------------------------------------------------------
# Events: planned per speaker, scheduled to sessions, rendered with the session's date
# --------------------------------------------------------------------------------------

class Ev:
    def __init__(self, kind, **data):
        self.kind = kind
        self.d = data
        self.turns = {}   # named evidence turns, filled when rendered
        self.session = None
        self.sess_date = None


class Conv:
    def __init__(self, idx, rng):
        self.idx = idx
        self.rng = rng
        _USED.clear()
        (n1, g1), (n2, g2) = PAIRS[idx]
        used = {n1, n2}
        cities = rng.sample(HOME_CITIES, 2)
        self.A = Persona(rng, n1, g1, used, cities[0])
        self.B = Persona(rng, n2, g2, used, cities[1])
        self.people = [self.A, self.B]
        self.n_sessions = rng.randint(23, 27)
        start = dt.datetime(2023, rng.randint(1, 6), rng.randint(1, 28), rng.randint(9, 20), rng.choice([0, 5, 12, 20, 31, 38, 45, 56]))
        self.dates = []
        t = start
        for _ in range(self.n_sessions):
            self.dates.append(t)
            t = t + dt.timedelta(days=rng.randint(5, 15), hours=rng.randint(-6, 6), minutes=rng.randint(-40, 40))
            if t.hour < 8:
                t = t.replace(hour=rng.randint(9, 12))
            if t.hour > 22:
                t = t.replace(hour=rng.randint(18, 21))
        self.questions = []
        self.events = {self.A.name: [], self.B.name: []}
        self.turn_counter = 0

    # ------------------------------------------------------------------ planning
    def plan(self):
        rng = self.rng
        jobs = rng.sample(JOBS, 2)
        storylines = rng.sample(list(STORYLINES), 2)
        trip_cities = rng.sample(CITIES, 8)
        genres_all = rng.sample(GENRES, 6)
        hobbies = rng.sample(HOBBIES, 4)
        instruments = rng.sample(INSTRUMENTS, 2)
        injuries = rng.sample(INJURIES, 2)
        pet_names = rng.sample(PET_NAMES, 6)
        for i, P in enumerate(self.people):
            chains = []
            P.job = jobs[i]
            P.storyline = storylines[i]
            # outings: distinct activities, varied companions
            comps = P.companions(rng)
            acts = rng.sample(list(ACTS), rng.randint(9, 11))
            for a in acts:
                c = rng.choice(comps)
                chains.append([Ev("outing", act=a, comp=c, place=rng.choice(ACTS[a]["places"]), det=rng.randrange(len(ACTS[a]["detail"])))])
            # pets: one or two, each with anecdotes
            npets = rng.choice([1, 2, 2])
            species = rng.sample(PETS, npets)
            P.pets = []
            for k, sp in enumerate(species):
                pet = dict(species=sp["species"], kind=rng.choice(sp["kinds"]), young=sp["young"], name=pet_names[i * 3 + k],
                           g=rng.choice(["f", "m"]), new=(k > 0 or rng.random() < 0.5))
                P.pets.append(pet)
                anecs = [a for a in PET_ANEC if a[3] is None or pet["species"] in a[3]]
                ch = [Ev("pet_intro", pet=pet)]
                for a in rng.sample(anecs, min(len(anecs), rng.choice([1, 2]))):
                    ch.append(Ev("pet_anec", pet=pet, anec=a, x=rng.choice(a[2])))
                chains.append(ch)
            # job
            j = P.job
            ch = [Ev("job_intro", job=j)]
            for s in rng.sample(j["stories"], 2):
                ch.append(Ev("job_story", job=j, story=s))
            P.changes_job = rng.random() >= 0.6
            if not P.changes_job:
                ch.append(Ev("promotion", job=j))
            else:
                others = [x for x in JOBS if x not in jobs]
                ch.append(Ev("job_change", job=j, new=rng.choice(others),
                             reason=rng.choice(["the commute was two hours a day", "I wanted more regular hours",
                                                "my boss kept taking credit for my work", "I needed a bigger challenge",
                                                "they offered me remote work and a better salary"])))
            chains.append(ch)
            # trips
            cities = trip_cities[i * 4:(i + 1) * 4]
            P.trips = []
            for k, c in enumerate(cities[:3]):
                comp = rng.choice([x for x in comps if x[0] != "cowork"] + [None])
                ev = Ev("trip", city=c, comp=comp, food=rng.choice(c["food"]), sight=rng.choice(c["sight"]), days=rng.randint(3, 9))
                if k == 0:
                    chains.append([Ev("trip_plan", city=c, month=None), ev])
                else:
                    chains.append([ev])
            chains.append([Ev("trip_plan_future", city=cities[3])])
            # family
            fam = ["sib_engaged", "parent_birthday", "sib_moved", "parent_surgery", "sib_baby"]
            if P.kids:
                fam += ["kid_recital", "kid_school", "kid_sport"]
            if P.partner:
                fam += ["anniversary"]
            for f in rng.sample(fam, min(len(fam), rng.randint(4, 6))):
                chains.append([Ev("family", what=f)])
            # books
            genres = genres_all[i * 3:(i + 1) * 3]
            for k, (gname, plots) in enumerate(genres):
                title = "The " + rng.choice(BOOK_ADJ) + " " + rng.choice(BOOK_NOUN)
                author = rng.choice(AUTH_F) + " " + rng.choice(AUTH_L)
                role = ["read", "recommend", "bookclub"][k]
                chains.append([Ev("book", genre=gname, plot=rng.choice(plots), title=title, author=author, role=role)])
            # food
            for dsh, occ in zip(rng.sample(DISHES, 2), rng.sample(OCCASIONS, 2)):
                chains.append([Ev("cook", dish=dsh, occ=occ)])
            cu = rng.choice(CUISINES)
            chains.append([Ev("restaurant", cuisine=cu[0], rname=cu[1], comp=rng.choice(comps), dish=None)])
            chains.append([Ev("comfort", food=rng.choice(COMFORT))])
            # health
            inj = injuries[i]
            chains.append([Ev("injury", inj=inj, cause=rng.choice(inj["cause"])), Ev("recovery", inj=inj, how=rng.choice(RECOVER))])
            if rng.random() < 0.5:
                chains.append([Ev("illness", ill=rng.choice(ILLNESS))])
            else:
                chains.append([Ev("checkup", chk=rng.choice(CHECKUP))])
            # hobbies
            h = hobbies[i * 2]
            chains.append([Ev("hobby_start", h=h), Ev("hobby_art", h=h, art=rng.choice(h["art"]))])
            h2 = hobbies[i * 2 + 1]
            chains.append([Ev("hobby_start", h=h2)])
            chains.append([Ev("instrument", inst=instruments[i], teacher=rng.choice(["a YouTube channel", "a retired music teacher down the street", "an app", "my neighbor"]))])
            # storyline
            chains.append(STORYLINES[P.storyline](rng, P))
            for ch in chains:
                for e in ch:
                    e.spk = P
            self.events[P.name] = chains
        self.schedule()

    def schedule(self):
        rng = self.rng
        self.sess_eps = [[] for _ in range(self.n_sessions)]
        load = [0] * self.n_sessions
        own = {P.name: [0] * self.n_sessions for P in self.people}
        allchains = [c for P in self.people for c in self.events[P.name]]
        rng.shuffle(allchains)
        allchains.sort(key=lambda c: -len(c))
        for ch in allchains:
            mine = own[ch[0].spk.name]
            n = len(ch)
            if ch[0].kind == "storyline":
                # spread a storyline over the conversation
                span = self.n_sessions // n
                picks = [rng.randrange(k * span, (k + 1) * span) for k in range(n)]
            else:
                cand = list(range(self.n_sessions))
                picks = []
                for _ in range(n):
                    w = [1.0 / ((1 + load[s]) ** 2 * (1 + mine[s]) ** 3) if s not in picks else 0 for s in cand]
                    picks.append(rng.choices(cand, weights=w)[0])
                picks.sort()
            for e, s in zip(ch, picks):
                e.session = s
                self.sess_eps[s].append(e)
                load[s] += 1
                mine[s] += 1

    # ------------------------------------------------------------------ rendering
    def addq(self, cat, text, evs, answer):
        self.questions.append(dict(category=cat, question=text, ev=evs, answer=answer))

    def render(self):
        self.sessions = []
        for s in range(self.n_sessions):
            self.sessions.append(self.render_session(s))
        self.aggregate_questions()

    def render_session(self, s):
        rng = self.rng
        d = self.dates[s].date()
        eps = self.sess_eps[s][:]
        rng.shuffle(eps)
        # keep chain order inside a session (pet intro before its anecdote etc. never share one, but be safe)
        order = {"pet_intro": 0, "job_intro": 0, "hobby_start": 0, "trip_plan": 0, "injury": 0}
        eps.sort(key=lambda e: order.get(e.kind, 1))
        turns = []
        first, second = (self.A, self.B) if rng.random() < 0.5 else (self.B, self.A)
        turns += opening(rng, first, second, s, d)
        fillers_left = rng.choice([0, 1, 1, 2])
        for e in eps:
            if fillers_left and rng.random() < 0.35:
                turns += filler(rng, self, turns)
                fillers_left -= 1
            e.sess_date = d
            turns += self.render_event(e, d, turns)
        while fillers_left:
            turns += filler(rng, self, turns)
            fillers_left -= 1
        turns += closing(rng, self, turns)
        # strict alternation: merge consecutive turns of one speaker
        out = []
        for t in turns:
            if out and out[-1]["speaker"] == t["speaker"]:
                prev = out.pop()
                t["text"] = prev["text"] + " " + t["text"]
                prev["alias"] = t
            out.append(t)
        for i, t in enumerate(out):
            t["dia_id"] = f"D{s + 1}:{i + 1}"
            t["ts"] = self.dates[s] + dt.timedelta(minutes=i)
        return out

    def render_event(self, e, d, turns):
        S = e.spk
        L = self.B if S is self.A else self.A
        prev = turns[-1]["speaker"] if turns else None
        fn = globals()["r_" + e.kind] if e.kind != "storyline" else r_storyline
        out = fn(self, e, S, L, d, prev)
        f = e.turns.get("fact")
        if f is not None:
            ck = KIND_COLOR[e.kind]
            if ck == "story" and e.d["stage"] > 0:
                ck = "story2"
            pool = COLOR[ck]
            if e.kind == "outing":
                pool = pool + (COLOR["outdoor"] if ACTS[e.d["act"]]["outdoor"] else []) + \
                    (COLOR["physical"] if e.d["act"] in ("hiking", "kayaking", "camping", "climbing", "biking", "skating") else [])
            col = fresh(self.rng, pool)
            if self.rng.random() < 0.65 and " ".join(col.split()[:3]) not in f["text"]:
                f["text"] += " " + col
            if self.rng.random() < 0.2 and not f["text"].startswith(("So", "Okay", "Oh", "Big", "Guess", "Can", "Don't", "New", "Update", "Family", "Kitchen", "Book", "Secret", "Marathon", "Adoption", "Bakery", "Spanish", "Funny", "You", "Remember", "Random", "Good", "Rough", "Meet", "¡")):
                f["text"] = self.rng.choice(LEADINS) + f["text"]
        sad = e.kind in SAD_KINDS or (e.kind == "family" and e.d["what"] == "parent_surgery")
        if e.kind != "outing":
            if out[-1]["speaker"] == S.name:
                add_tail(self.rng, S, L, out, sad=sad, kind=e.kind)
            elif self.rng.random() < 0.4 and not sad:
                out.append(T(S, fresh(self.rng, SHARER_TAILS if KIND_COLOR[e.kind] in ("outing", "trip", "pet", "pet2", "hobby") else NEUTRAL_TAILS)))
                out.append(T(L, self.rng.choice(["Love that.", "Ha, I bet.", "Keep me posted!", "I can't wait to hear more."])))
        return out

    # ------------------------------------------------------------------ multi-hop and open-domain
    def aggregate_questions(self):
        rng = self.rng
        self.both_questions()
        for P in self.people:
            evs = [e for ch in self.events[P.name] for e in ch]
            p = P.p
            n = P.name

            def distinct(es):
                seen, out = set(), []
                for e in es:
                    if e.session not in seen:
                        seen.add(e.session)
                        out.append(e)
                return out
            # pets
            intros = distinct([e for e in evs if e.kind == "pet_intro"])
            if len(intros) >= 2:
                names = " and ".join(f"{a_an(e.d['pet']['kind'])} named {e.d['pet']['name']}" for e in intros)
                self.addq("multi-hop", rng.choice([f"What pets does {n} have?", f"What animals does {n} have at home?", f"What are the names of {poss(n)} pets?"]),
                          [e.turns["fact"] for e in intros], names)
            # trips
            trips = distinct([e for e in evs if e.kind == "trip"])
            if len(trips) >= 2:
                self.addq("multi-hop", rng.choice([f"Which cities has {n} traveled to?", f"Where has {n} been on vacation?", f"What places did {n} visit on {p['pos']} trips?"]),
                          [e.turns["fact"] for e in trips], ", ".join(e.d["city"]["city"] for e in trips))
                conts = {e.d["city"]["cont"] for e in trips}
                if len(trips) >= 2:
                    self.addq("open-domain", f"How many different continents has {n} visited on {p['pos']} trips?",
                              [e.turns["fact"] for e in trips], f"{len(conts)} ({', '.join(sorted(conts))})")
                foods = [e for e in trips if "detail" in e.turns and e.d.get("dkind") == "food"]
                if len(foods) >= 2:
                    self.addq("multi-hop", rng.choice([f"What foods did {n} try while traveling?", f"What did {n} eat on {p['pos']} trips abroad?"]),
                              [e.turns["detail"] for e in foods], "; ".join(e.d["food"] for e in foods))
            # books
            books = distinct([e for e in evs if e.kind == "book"])
            if len(books) >= 2:
                self.addq("multi-hop", rng.choice([f"What books has {n} read?", f"Which books has {n} mentioned reading?", f"What has {n} been reading lately?"]),
                          [e.turns["fact"] for e in books], "; ".join(f"{e.d['title']} by {e.d['author']}" for e in books))
                self.addq("multi-hop", f"What genres of books does {n} read?", [e.turns["fact"] for e in books],
                          ", ".join(e.d["genre"] for e in books))
                self.addq("open-domain", rng.choice([f"Would {n} enjoy a gift card to a bookstore?", f"Would {n} be likely to join a book club?"]),
                          [e.turns["fact"] for e in books[:2]], "Likely yes; " + p["sub"] + " reads a lot")
            # outings by companion
            by_comp = {}
            for e in evs:
                if e.kind == "outing":
                    by_comp.setdefault(e.d["comp"][0], []).append(e)
            for ck, es in by_comp.items():
                es = distinct(es)
                if len(es) >= 2:
                    cq = es[0].d["comp"][3]
                    self.addq("multi-hop", rng.choice([f"What activities has {n} done with {cq}?", f"What does {n} like to do with {cq}?",
                                                       f"What kinds of outings has {n} gone on with {cq}?"]),
                              [e.turns["fact"] for e in es[:3]], ", ".join(ACTS[e.d["act"]]["noun"] for e in es[:3]))
            outdoor = distinct([e for e in evs if e.kind == "outing" and ACTS[e.d["act"]]["outdoor"]])
            if len(outdoor) >= 2:
                ev = rng.sample(outdoor, min(3, len(outdoor)))
                self.addq("open-domain", rng.choice([f"Would {n} enjoy a weekend camping trip in a national park?", f"Is {n} more of an outdoorsy person or a homebody?",
                                                     f"Would {n} be up for a day outdoors in the mountains?"]),
                          [e.turns["fact"] for e in ev], "Outdoorsy; " + ", ".join(ACTS[e.d["act"]]["noun"] for e in ev))
                self.addq("multi-hop", rng.choice([f"What outdoor activities has {n} done?", f"What has {n} done outdoors in the past few months?"]),
                          [e.turns["fact"] for e in ev], ", ".join(ACTS[e.d["act"]]["noun"] for e in ev))
            # hobbies
            hob = distinct([e for e in evs if e.kind in ("hobby_start", "instrument")])
            if len(hob) >= 2:
                ev = hob[:3]
                self.addq("multi-hop", rng.choice([f"What hobbies has {n} picked up?", f"What new skills is {n} learning?", f"What classes or hobbies has {n} started?"]),
                          [e.turns["fact"] for e in ev], ", ".join(e.d["h"]["h"] if "h" in e.d else e.d["inst"] for e in ev))
            # cooking
            cooks = distinct([e for e in evs if e.kind == "cook"])
            if len(cooks) >= 2:
                self.addq("multi-hop", rng.choice([f"What dishes has {n} cooked?", f"What has {n} made for special occasions?"]),
                          [e.turns["fact"] for e in cooks], ", ".join(e.d["dish"][0] for e in cooks))
                self.addq("open-domain", f"Does {n} enjoy cooking?", [e.turns["fact"] for e in cooks], "Yes; " + ", ".join(e.d["dish"][0] for e in cooks))
            # jobs
            jobs = [e for e in evs if e.kind in ("job_intro", "job_change", "promotion")]
            jc = [e for e in jobs if e.kind == "job_change"]
            ji = [e for e in jobs if e.kind == "job_intro"]
            if jc and ji and jc[0].session != ji[0].session:
                self.addq("multi-hop", rng.choice([f"Where has {n} worked?", f"What jobs has {n} had?"]), [ji[0].turns["fact"], jc[0].turns["fact"]],
                          f"{P.job['title']} at {P.job['place']}, then {jc[0].d['new']['title']} at {jc[0].d['new']['place']}")
            pr = [e for e in jobs if e.kind == "promotion"]
            if pr and ji and pr[0].session != ji[0].session:
                self.addq("multi-hop", f"How has {poss(n)} career progressed?", [ji[0].turns["fact"], pr[0].turns["fact"]],
                          f"{P.job['title']}, then promoted to {P.job['promo']}")
            if ji:
                q, a = P.job["od"]
                self.addq("open-domain", q.format(S=n, **p), [ji[0].turns["fact"]], a.format(**p))
            # pets: open-domain
            pe = distinct([e for e in evs if e.kind in ("pet_intro", "pet_anec")])
            if len(pe) >= 2:
                self.addq("open-domain", rng.choice([f"Would {n} likely be interested in volunteering at an animal shelter?", f"Is {n} an animal lover?"]),
                          [e.turns["fact"] for e in pe[:2]], "Likely yes; " + p["sub"] + " has pets and dotes on them")
            # injury + recovery
            inj = [e for e in evs if e.kind == "injury"]
            rec = [e for e in evs if e.kind == "recovery"]
            if inj and rec and inj[0].session != rec[0].session:
                self.addq("multi-hop", f"How did {n} get hurt, and what helped {p['obj']} recover?", [inj[0].turns["fact"], rec[0].turns["fact"]],
                          f"{inj[0].d['inj']['hurt']} from {inj[0].d['cause']}; {rec[0].d['how']}")
                self.addq("temporal", f"How long did it take {n} to recover from {p['pos']} {inj[0].d['inj']['noun']}?", [inj[0].turns["fact"], rec[0].turns["fact"]],
                          f"roughly from {inj[0].d['when_ans']} until before {fmt_date(rec[0].sess_date)}")
            # family
            fam = distinct([e for e in evs if e.kind == "family" and e.d["what"].startswith("sib")])
            if len(fam) >= 2:
                self.addq("multi-hop", rng.choice([f"What has been going on in {poss(n)} {P.sib['rel']}'s life?", f"What news has {n} shared about {p['pos']} {P.sib['rel']}?"]),
                          [e.turns["fact"] for e in fam], "; ".join(e.d["summary"] for e in fam))
            kid = distinct([e for e in evs if e.kind == "family" and e.d["what"].startswith("kid")])
            if len(kid) >= 2:
                kn = {e.d["summary"].split()[0] for e in kid}
                self.addq("multi-hop", f"What activities are {poss(n)} kids involved in?" if len(kn) > 1 else f"What activities is {next(iter(kn))} involved in?",
                          [e.turns["fact"] for e in kid], "; ".join(e.d["summary"] for e in kid))
            if P.kids:
                ke = [e for e in evs if e.kind == "family" and e.d["what"].startswith("kid")] + [e for e in evs if e.kind == "outing" and e.d["comp"][0] == "kids"]
                if ke:
                    self.addq("open-domain", f"Is {n} a parent?", [ke[0].turns["fact"]], f"Yes, {p['sub']} has " + ("kids" if len(P.kids) > 1 else f"a {P.kids[0]['rel']}"))
            # more multi-hop: a pet's antics, work stories, health, a parent, hobby progress, travel company
            for pet in P.pets:
                an = distinct([e for e in evs if e.kind == "pet_anec" and e.d["pet"] is pet])
                if len(an) >= 2:
                    self.addq("multi-hop", rng.choice([f"What has {pet['name']} been up to lately?", f"What trouble has {poss(n)} {pet['species']} {pet['name']} gotten into?"]),
                              [e.turns["fact"] for e in an], "; ".join(e.d["x"].format(**pet_pron(pet)) for e in an))
            if len(intros) >= 2:
                self.addq("multi-hop", f"How many pets does {n} have?", [e.turns["fact"] for e in intros], str(len(P.pets)))
            st = distinct([e for e in evs if e.kind == "job_story"])
            if len(st) >= 2:
                self.addq("multi-hop", rng.choice([f"What memorable things have happened at {poss(n)} work?", f"What stories has {n} told about {p['pos']} job?"]),
                          [e.turns["fact"] for e in st], "; ".join(e.d["story"][2] for e in st))
            hl = distinct([e for e in evs if e.kind in ("injury", "illness", "checkup")])
            if len(hl) >= 2:
                self.addq("multi-hop", rng.choice([f"What health problems has {n} dealt with?", f"What health issues has {n} mentioned?"]),
                          [e.turns["fact"] for e in hl], "; ".join(e.d["inj"]["noun"] if "inj" in e.d else (e.d["ill"][1] if "ill" in e.d else e.d["chk"][0]) for e in hl))
            par = distinct([e for e in evs if e.kind == "family" and e.d["what"].startswith("parent")])
            if len(par) >= 2:
                self.addq("multi-hop", f"What has been happening with {poss(n)} {P.parent}?", [e.turns["fact"] for e in par], "; ".join(e.d["summary"] for e in par))
            for hs in [e for e in evs if e.kind == "hobby_start"]:
                ha = [e for e in evs if e.kind == "hobby_art" and e.d["h"] is hs.d["h"]]
                if ha and ha[0].session != hs.session:
                    self.addq("multi-hop", f"Where does {n} do {hs.d['h']['h']}, and what has {p['sub']} finished so far?", [hs.turns["fact"], ha[0].turns["fact"]],
                              f"{hs.d['h']['where']}; {ha[0].d['art']}")
            tc = [e for e in trips if e.d["comp"]]
            if len(tc) >= 2:
                self.addq("multi-hop", f"Who has {n} traveled with?", [e.turns["fact"] for e in tc],
                          "; ".join(f"{e.d['comp'][3]} ({e.d['city']['city']})" for e in tc))
            tp = [e for e in evs if e.kind == "trip_plan"]
            for pl in tp:
                tr = [e for e in trips if e.d["city"] is pl.d["city"]]
                if tr and tr[0].session != pl.session:
                    self.addq("multi-hop", f"Did {n} end up taking the trip to {pl.d['city']['city']} {p['sub']} was planning, and how long was it?",
                              [pl.turns["fact"], tr[0].turns["fact"]], f"yes, {tr[0].d['days']} days")
            # temporal order of two outings
            outs = distinct([e for e in evs if e.kind == "outing"])
            for _ in range(3):
                if len(outs) < 2:
                    break
                x, y = rng.sample(outs, 2)
                nx, ny = ACTS[x.d["act"]]["noun"], ACTS[y.d["act"]]["noun"]
                first = x if x.session < y.session else y
                self.addq("temporal", f"Which came first, {poss(n)} {nx} with {x.d['comp'][3]} or {p['pos']} {ny} with {y.d['comp'][3]}?",
                          [x.turns["fact"], y.turns["fact"]], f"the {ACTS[first.d['act']]['noun']}")
            # storyline
            sl = [e for e in evs if e.kind == "storyline"]
            STORY_AGG[P.storyline](self, P, sl)
            # travel wish
            fut = [e for e in evs if e.kind == "trip_plan_future"]
            if fut and len(trips) >= 1:
                self.addq("open-domain", f"Would {n} be interested in a job that involves a lot of international travel?",
                          [trips[0].turns["fact"], fut[0].turns["fact"]], "Likely yes; " + p["sub"] + " travels often and plans more trips")


    def both_questions(self):
        """Multi-hop questions about both speakers."""
        rng = self.rng
        A, B = self.A, self.B
        ea = {e.d["act"]: e for ch in self.events[A.name] for e in ch if e.kind == "outing"}
        eb = {e.d["act"]: e for ch in self.events[B.name] for e in ch if e.kind == "outing"}
        shared = sorted(set(ea) & set(eb))
        for act in rng.sample(shared, min(3, len(shared))):
            x, y = ea[act], eb[act]
            if x.session == y.session:
                continue
            self.addq("multi-hop", rng.choice([f"Where did {A.name} and {B.name} each go {ACTS[act]['q'][0].split(' ', 1)[1] if ACTS[act]['q'][0].startswith('go ') else 'for their ' + ACTS[act]['noun']}?",
                                               f"Both {A.name} and {B.name} mentioned {a_an(ACTS[act]['noun'])}; who did each of them go with?"]),
                      [x.turns["fact"], y.turns["fact"]], f"{A.name}: {x.d['place']} with {x.d['comp'][3]}; {B.name}: {y.d['place']} with {y.d['comp'][3]}")
        pa = [e for ch in self.events[A.name] for e in ch if e.kind == "pet_intro"]
        pb = [e for ch in self.events[B.name] for e in ch if e.kind == "pet_intro"]
        if len(pa) != len(pb):
            self.addq("multi-hop", f"Who has more pets, {A.name} or {B.name}?", [e.turns["fact"] for e in pa + pb],
                      f"{A.name if len(pa) > len(pb) else B.name} ({max(len(pa), len(pb))} vs {min(len(pa), len(pb))})")
        ja = [e for ch in self.events[A.name] for e in ch if e.kind == "job_intro"]
        jb = [e for ch in self.events[B.name] for e in ch if e.kind == "job_intro"]
        if ja and jb and ja[0].session != jb[0].session:
            self.addq("multi-hop", f"What do {A.name} and {B.name} do for work?", [ja[0].turns["fact"], jb[0].turns["fact"]],
                      f"{A.name}: {A.job['title']}; {B.name}: {B.job['title']}")


# --------------------------------------------------------------------------------------
# Conversation furniture: openings, small talk, closings
# --------------------------------------------------------------------------------------

def T(speaker, text):
    return dict(speaker=speaker.name, text=text)


def opening(rng, a, b, s, d):
    wd = WEEKDAYS[d.weekday()]
    if s == 0:
        opts = [(f"Hey {b.name}! It's so good to finally catch up properly. How have you been?",
                 f"{a.name}! I've been good, busy as always. I was just thinking about you."),
                (f"Hi {b.name}! I feel like we never get to really talk anymore, so let's fix that.",
                 "Agreed! I've missed our chats. So much to tell you.")]
    else:
        opts = [(f"Hey {b.name}! Happy {wd}. How's your week going?", rng.choice([f"Hi {a.name}! Honestly pretty good, can't complain.", "Hey! It's been a week, but a good one mostly."])),
                (f"Hi {b.name}, long time no talk! What's new?", rng.choice([f"{a.name}! Oh, a few things. You first though.", "Hey! So much, honestly."])),
                (f"{b.name}! Got a minute to chat?", rng.choice(["Always for you. What's up?", "Yes! I was hoping you'd message."])),
                (f"Morning, {b.name}! Coffee in hand and ready to catch up.", rng.choice([f"Ha, same. Good morning, {a.name}!", "Perfect timing, I just sat down."]))
                if 5 <= d.weekday() or rng.random() < 0.5 else
                (f"Hey {b.name}, how are you holding up?", f"Hanging in there! Better now. How are you, {a.name}?"),
                ("Hey you! Feels like forever, right?", rng.choice(["Way too long! How are things?", "I know, time flies. How have you been?"]))]
    x, y = rng.choice(opts)
    return [T(a, x), T(b, y)]


SMALLTALK = [
    ["The weather has been so weird lately. Sunny one minute, pouring the next.", "Same here! I brought an umbrella every day this week and only needed it once.",
     "Classic. At least the garden is happy."],
    ["Have you been watching anything good?", "I just started {tv}. I'm hooked, I watched five episodes in one night.", "Okay, adding it to my list."],
    ["I've been sleeping so badly this week.", "Oh no, is something on your mind?", "Not really, I think it's just too much coffee, ha."],
    ["Work has been crazy for me lately, I barely had time to do anything fun.", "I hear you. Some weeks just disappear.", "Exactly. Anyway, I'm trying to slow down a bit."],
    ["Did you hear they're finally fixing the road by the old mill?", "Finally! That pothole ate my tire last year.", "Ha, the famous pothole."],
    ["I've been trying to drink more water and go to bed earlier. Adulting.", "Look at you! I keep saying I'll do the same.", "We can be accountability buddies."],
    ["What are you up to this weekend?", "Not sure yet, maybe nothing, which sounds perfect honestly.", "A weekend of nothing sounds great."],
    ["I finally cleaned out my closet. Three bags for donation!", "That's so satisfying. I need to do that.", "It felt like therapy, honestly."],
    ["My phone screen cracked again.", "Again?! You need a better case.", "I know, I know."],
    ["Do you ever just sit in the car for a few minutes before going inside?", "All the time. It's the only quiet place.", "Right? Car therapy."],
    ["I tried that new coffee place on the corner. Overpriced, but the muffins are great.", "Ooh, which muffins?", "Blueberry. Huge ones."],
    ["I keep seeing ads for things I only thought about buying. It's creepy.", "Ha, my phone is definitely listening.", "Honestly, at this point."],
    ["How's your family doing?", "Everyone's good, thanks for asking. Busy as always.", "Glad to hear it."],
    ["I need a vacation from my vacation planning, ha.", "Ha, that's the worst part, all the tabs open.", "Forty tabs. I'm not kidding."],
    ["I've been trying to read more instead of scrolling at night.", "How's that going?", "Some nights better than others, ha."],
    ["I'm so ready for the next season. I'm tired of this weather.", "Same. I want long evenings again.", "Soon!"],
]


def filler(rng, conv, turns):
    a, b = conv.A, conv.B
    prev = turns[-1]["speaker"] if turns else None
    first = b if prev == a.name else a
    second = a if first is b else b
    lines = fresh(rng, [tuple(x) for x in SMALLTALK])
    out = []
    for k, line in enumerate(lines[:rng.choice([2, 3, len(lines)])]):
        out.append(T(first if k % 2 == 0 else second, line.format(tv=rng.choice(BANDS_TV))))
    return out


def closing(rng, conv, turns):
    a, b = conv.A, conv.B
    prev = turns[-1]["speaker"] if turns else None
    first = b if prev == a.name else a
    second = a if first is b else b
    opts = [(f"I should get going, but this was so nice. Talk soon, {second.name}!", f"Bye {first.name}! Take care of yourself."),
            ("Okay, I have to run. Let's catch up again soon!", "Definitely. Have a good night!"),
            (f"Oh shoot, I'm late for something. Say hi to {second.sib['name']} for me!", f"Will do! Bye, {first.name}!"),
            ("This was exactly what I needed today. Thank you for listening.", "Anytime, seriously. Talk soon!"),
            ("Alright, dinner's ready over here. Bye for now!", "Enjoy! Talk later.")]
    x, y = rng.choice(opts)
    return [T(first, x), T(second, y)]


REACT = ["Wow", "Oh nice", "That sounds amazing", "Aw, I love that", "No way", "Ha, that's great", "That's so cool", "Oh fun",
         "Oh wow", "That's awesome", "Yay", "Oh my gosh"]
PROMPTS = ["So what's new with you?", "Anyway, enough about me. How have you been?", "What have you been up to?",
           "How about you, anything new?", "Okay, your turn. What's going on with you?", "And how are things on your end?",
           "What have you been up to? I feel like I haven't heard from you in forever.", "Okay, I've been talking way too much. What's new with you?",
           "How's life on your side? Tell me something good."]
SAD = ["Oh no", "Oh, that's awful", "Ugh, I'm so sorry", "Oh no, that sounds rough", "Yikes"]


SHARER_TAILS = ["I'll send you pictures later.", "Honestly, it was the highlight of my month.", "I needed that so badly after the week I had.",
                "We're already talking about doing it again.", "I keep thinking about it.", "Remind me to show you the photos.",
                "It was one of those days that just felt easy.", "I didn't even look at my phone the whole time, which is a first."]
NEUTRAL_TAILS = ["Thanks for being excited with me.", "Anyway, that's my big news.", "I'll keep you posted, obviously.",
                 "It's been a lot, but mostly good.", "I just had to tell someone."]
TANGENTS = ["I've been stuck inside all week, so I'm living through you.", "My weekend was mostly laundry, ha.", "That reminds me, I still owe you lunch.",
            "I need more days like that.", "You always find the best things to do.", "I'm making a note of that for later.",
            "My week has been so boring in comparison.", "I love hearing about this stuff."]
EV = {"outing", "trip", "family"}
TAILS = [("Did you take any pictures?", "Tons. I'll send you the good ones tonight.", EV | {"hobby_art", "pet_intro", "pet_anec"}),
         ("How are you feeling about it all?", "Honestly, really good. It's been a while since I felt this excited about something.",
          {"storyline", "job_change", "promotion", "trip_plan", "trip_plan_future", "hobby_start"}),
         ("I'm so happy for you.", "Thank you, that means a lot. Really.", {"storyline", "job_change", "promotion", "pet_intro", "hobby_art", "family"}),
         ("You have to tell me more next time.", "I will, I promise. There's so much more.", None),
         ("How did you even find the time?", "I didn't, really. I just decided to stop waiting for a free weekend.", {"outing", "hobby_start", "cook", "book", "instrument", "hobby_art"}),
         ("Was anyone else there that I know?", "No, just us. It was nice to keep it small.", {"outing", "restaurant"}),
         ("Wait, I want to hear the whole story.", "Okay, I'll tell you everything when we see each other.", {"job_story", "pet_anec", "trip", "job_change"}),
         ("Honestly, that made my day.", "Ha, glad I could share it.", {"pet_anec", "job_story", "hobby_art", "comfort", "cook"})]


COLOR = {
    "outing": ["It was exactly what I needed after a long week at work.", "We stopped for coffee on the way and talked the whole drive.",
               "I almost bailed because I was tired, and I'm so glad I didn't.", "We got there early enough to beat the crowds."],
    "outdoor": ["The weather was perfect, barely a cloud.", "It was chilly in the morning but gorgeous by noon."],
    "physical": ["I'm definitely feeling it in my legs today.", "I slept ten hours straight afterward."],
    "pet": ["I've wanted a pet for so long.", "The first night was rough, lots of crying, but we're figuring it out.",
            "My whole camera roll is pet photos now.", "I didn't know I could love a little creature this much."],
    "pet2": ["My whole camera roll is pet photos now.", "I didn't know I could love a little creature this much.", "Never a dull moment in this house.",
             "Who's in charge here, really?", "I swear there's a tiny criminal living with me."],
    "job": ["Anyway, that's my life right now.", "Some days I wonder why I chose this, and then a day like that reminds me.",
            "I've been drinking way too much coffee to get through it."],
    "family": ["It's been a whole thing in our family group chat.", "My phone has not stopped buzzing since.", "Family stuff always hits me harder than I expect."],
    "book": ["I've been reading on my lunch breaks to get through it.", "I read the last fifty pages in the bath.", "It's the kind of book you want to talk about with someone."],
    "food": ["I had flour on my face for most of the evening.", "My kitchen looked like a bomb went off.", "I doubled the garlic, obviously."],
    "comfort": ["Extra cheese, no regrets.", "Sometimes you just need a bowl of something warm.", "It tastes like being a kid again."],
    "eat": ["I'm still thinking about the sauce.", "We ordered way too much and took home leftovers.", "The portions were huge."],
    "plan": ["I already have a spreadsheet, obviously.", "I've been saving up for it all year.", "I keep looking at flights instead of working."],
    "story2": ["It's been a long road.", "Every step of this feels huge.", "I didn't think we'd get here this fast."],
    "health": ["I hate being stuck on the couch.", "Getting older is not for the weak, ha.", "I'm trying to be a good patient."],
    "hobby": ["It's nice to do something with my hands that isn't a screen.", "I used to think I wasn't a creative person.", "It's the one part of the week that's just for me.",
              "My teacher says I have patience, which is news to me.", "I'm hooked, honestly."],
    "story": ["It's been on my mind for months, and saying it out loud makes it real.", "I'm excited and terrified in equal amounts.", "I keep pinching myself."],
    "trip": ["The flight home was delayed four hours, but I didn't even care.", "I took about a thousand photos.", "My suitcase came back a lot heavier than it left."],
}
KIND_COLOR = {"outing": "outing", "pet_intro": "pet", "pet_anec": "pet2", "job_intro": "job", "job_story": "job", "promotion": "job", "job_change": "job",
              "family": "family", "book": "book", "cook": "food", "restaurant": "eat", "comfort": "comfort", "injury": "health", "recovery": "health",
              "illness": "health", "checkup": "health", "hobby_start": "hobby", "hobby_art": "hobby", "instrument": "hobby", "storyline": "story",
              "trip": "trip", "trip_plan": "plan", "trip_plan_future": "plan"}
LEADINS = ["Oh! ", "Okay, so. ", "Before I forget: ", "So! ", "Oh, I meant to tell you. ", "Okay, news. "]


SAD_TAILS = [("Is there anything I can do?", "Just this, honestly. Talking to you helps more than you know."),
             ("Please take it easy, okay? No heroics.", "I will, I promise. Doctor's orders, and also yours."),
             ("Sending you a big hug. Let me know if you need groceries or anything.", "Thank you. I might take you up on that."),
             ("That's a lot to deal with on top of everything else.", "It is, but I'm okay. One day at a time.")]
SAD_KINDS = {"injury", "illness", "checkup"}


def add_tail(rng, S, L, out, specific=None, sad=False, kind=None):
    """Sometimes the episode goes on for another exchange, as people's do."""
    if rng.random() < 0.65:
        fit = [(q, a) for q, a, ks in TAILS if ks is None or kind in ks]
        q, a = specific if specific and rng.random() < 0.6 else fresh(rng, SAD_TAILS if sad else fit)
        out.append(T(L, q))
        out.append(T(S, a))
    return out


def intro_turns(rng, S, L, prev, fact_text, prompt=None):
    """The turns that start an episode: L prompts when S spoke last, so the speakers alternate."""
    out = []
    if prev == S.name:
        out.append(T(L, prompt or rng.choice(PROMPTS)))
    f = T(S, fact_text)
    out.append(f)
    return out, f


def react(rng, S, sad=False):
    r = rng.choice(SAD if sad else REACT)
    r += (f", {S.name}" if rng.random() < 0.3 else "") + rng.choice(["!", "!", "."])
    if not sad and rng.random() < 0.5:
        r += " " + fresh(rng, TANGENTS)
    return r


# --------------------------------------------------------------------------------------
# Event renderers: each returns turns and records its questions
# --------------------------------------------------------------------------------------

def r_outing(cv, e, S, L, d, prev):
    rng = cv.rng
    a = ACTS[e.d["act"]]
    key, cev, cshort, cq, cqs = e.d["comp"]
    tmpl = rng.choice(a["fact"])
    kinds = a.get("when")
    if "pent {when}" in tmpl or "pent {When}" in tmpl:
        kinds = ["weekday", "weekend", "yesterday"]
    when, ans = rel_past(rng, d, kinds)
    if "pent {when}" in tmpl or "pent {When}" in tmpl:
        when = re.sub(r"^(over|on) (the )?", "last ", when)
    place = e.d["place"]
    fact = fill(tmpl, when=when, comp=cev, place=place)
    fact = re.sub(r"^my ", "My ", fact)
    prompt = rng.choice(PROMPTS + ["Did you get up to anything fun lately?", "How was your weekend?" if "weekend" in when else "Did you do anything fun this week?"])
    out, f = intro_turns(rng, S, L, prev, fact, prompt)
    e.turns["fact"] = f
    out.append(T(L, f"{react(rng, S)} {rng.choice(a['follow'])}"))
    dt_t, dq, xs = a["detail"][e.d["det"]]
    x = rng.choice(xs)
    det = T(S, fill(dt_t, x=x, compShort=cshort) + (" " + fresh(rng, SHARER_TAILS) if rng.random() < 0.5 else ""))
    out.append(det)
    e.turns["detail"] = det
    if rng.random() < 0.6:
        out.append(T(L, rng.choice(a["echo"])))
        out.append(T(S, rng.choice(["You should come next time!", "Ha, you'd love it.", "We should plan something like that together.", "Honestly, you'd be better at it than me."])))
    add_tail(rng, S, L, out, kind="outing", specific=(f"Would you {a['q'][0]} again?", rng.choice(["Definitely! Maybe when it's a bit warmer.", "Absolutely. Already looking at dates.",
                                                                            "Maybe, once my legs forgive me, ha."])))
    S_ = S.name
    qv = rng.choice(a["q"])
    tq = rng.choice([f"When did {S_} {qv} with {cq}?", f"When did {S_} and {cq} {qv}?", f"When was {poss(S_)} {a['noun']} with {cq}?"])
    cv.addq("temporal", tq, [f], ans)
    cv.addq("single-hop", fill(rng.choice(a["placeq"]), S=S_, compq=cq), [f], place)
    cv.addq("single-hop", fill(dq, S=S_, compq=cq, compqshort=cqs, place=place, pos=S.p["pos"]), [det], x)
    if key != "cowork":
        cv.addq("single-hop", rng.choice([f"Who did {S_} {qv} with?", f"Who went with {S_} to {place}?"]) if a["noun"] not in ("concert",) else f"Who did {S_} see {place} with?",
                [f], cev.replace("my ", f"{S.p['pos']} ").rstrip(","))
    return out


def pet_pron(pet):
    return dict(psub="she" if pet["g"] == "f" else "he", pobj="her" if pet["g"] == "f" else "him", ppos="her" if pet["g"] == "f" else "his")


def r_pet_intro(cv, e, S, L, d, prev):
    rng = cv.rng
    pet = e.d["pet"]
    pp = pet_pron(pet)
    n = pet["name"]
    if pet["new"]:
        when, ans = rel_past(rng, d, ["yesterday", "weekday", "weekend", "week", "days"])
        fact = rng.choice([
            f"Big news: we adopted {a_an(pet['kind'])} {when}! {cap(pp['ppos'])} name is {n}.",
            f"Meet {n}! {cap(pp['psub'])}'s a little {pet['kind']} we brought home from the rescue {when}.",
            f"I have a new roommate: {a_an(pet['kind'])} named {n}. We adopted {pp['pobj']} {when} and {pp['psub']} already runs the house.",
            (f"So I finally caved and got {a_an(pet['young'])}. {n} is {a_an(pet['kind'])}, came home with us {when}, and I'm obsessed." if pet['young'] != pet['kind'] else
             f"So I finally caved and got {a_an(pet['kind'])}! {n} came home with us {when}, and I'm obsessed."),
        ])
        out, f = intro_turns(rng, S, L, prev, fact)
        cv.addq("temporal", rng.choice([f"When did {S.name} adopt {n}?", f"When did {S.name} get {pos_of(S)} {pet['species']}?", f"When did {n} come home with {S.name}?"]), [f], ans)
    else:
        fact = rng.choice([
            f"My {pet['species']} {n} has been sitting on my laptop all morning, so if I disappear, that's why.",
            f"I'm typing this with {n}, my {pet['kind']}, glued to my side. {cap(pp['psub'])}'s been extra clingy this week.",
            f"{n} — my {pet['kind']}, have I told you about {pp['pobj']}? — just turned five and we had a little party.",
        ])
        out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice([f"{react(rng, S)} I need pictures of {n} immediately.", f"Aww, {n}! What a good name.",
                                f"Oh my gosh, a {pet['species']}! How is {pp['psub']} settling in?", f"{n} sounds like a character!"])))
    out.append(T(S, rng.choice([f"{cap(pp['psub'])}'s the sweetest. Sending you a photo later.", f"Ha, {pp['psub']}'s a handful, but worth it.",
                                f"{cap(pp['psub'])} follows me everywhere, even to the bathroom."])))
    cv.addq("single-hop", rng.choice([f"What is the name of {poss(S.name)} {pet['species']}?", f"What is {poss(S.name)} {pet['species']} called?",
                                      f"What did {S.name} name {pos_of(S)} {pet['species']}?"]), [f], n)
    if pet["species"] in ("dog", "cat", "tortoise", "parrot", "rabbit") and pet["kind"] != pet["species"]:
        cv.addq("single-hop", rng.choice([f"What kind of {pet['species']} is {n}?", f"What breed is {poss(S.name)} {pet['species']}?"]), [f], pet["kind"])
    return out


def pos_of(P):
    return P.p["pos"]


def r_pet_anec(cv, e, S, L, d, prev):
    rng = cv.rng
    pet = e.d["pet"]
    pp = pet_pron(pet)
    t, q, _, _ = e.d["anec"]
    when, ans = rel_past(rng, d)
    x = e.d["x"].format(**pp)
    fact = fill(t, pet=pet["name"], x=x, when=when, **pp)
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice(PROMPTS + [f"How's {pet['name']} doing?"]))
    e.turns["fact"] = f
    out.append(T(L, rng.choice([f"Ha! {pet['name']} is such a character.", f"{react(rng, S)} Is {pp['psub']} okay?", f"Oh {pet['name']}, what are we going to do with you."])))
    cv.addq("single-hop", fill(q, S=S.name, pet=pet["name"], pos=S.p["pos"]), [f], x)
    return out


def r_job_intro(cv, e, S, L, d, prev):
    rng = cv.rng
    j = e.d["job"]
    fact = fill(rng.choice(j["intro"]), place=j["place"])
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice(["How's work treating you?", "How's the job going?"] + PROMPTS))
    e.turns["fact"] = f
    lq, sa = rng.choice([("That sounds exhausting. Do you still like it?", "Most days I really do love it. The people make it worth it."),
                         ("I don't know how you do it. What's the best part?", "Honestly, the people. And the days when something I did actually helped."),
                         ("Wow. Are you getting any time off soon?", "I'm hoping for a long weekend next month. Fingers crossed.")])
    out.append(T(L, lq))
    out.append(T(S, sa))
    n = S.name
    if S.changes_job:
        cv.addq("single-hop", rng.choice([f"What did {n} do for work before changing jobs?", f"What was {poss(n)} job before {S.p['sub']} quit?"]), [f],
                f"{j['art']} {j['title']}")
        cv.addq("single-hop", f"Where did {n} work before changing jobs?", [f], j["place"])
    else:
        cv.addq("single-hop", rng.choice([f"What does {n} do for work?", f"What is {poss(n)} job?", f"What does {n} do for a living?"]), [f],
                f"{j['art']} {j['title']}")
        cv.addq("single-hop", rng.choice([f"Where does {n} work?", f"What is the name of {poss(n)} workplace?"]), [f], j["place"])
    return out


def r_job_story(cv, e, S, L, d, prev):
    rng = cv.rng
    t, q, a = e.d["story"]
    when, ans = rel_past(rng, d)
    out, f = intro_turns(rng, S, L, prev, rng.choice(["Funny thing at work: ", "So, work update. ", "", "You'll love this. "]) + fill(t, when=when),
                         rng.choice(["How's work?", "Anything exciting at work?"] + PROMPTS))
    e.turns["fact"] = f
    out.append(T(L, rng.choice([f"{react(rng, S)} That's a story.", "Ha! Only you.", "That's incredible. What happened next?"])))
    if rng.random() < 0.5:
        out.append(T(S, rng.choice(["Honestly, never a dull day.", "Everyone's still talking about it.", "I'll tell you the rest over coffee."])))
    cv.addq("single-hop", fill(q, S=S.name, **S.p), [f], a)
    return out


def r_promotion(cv, e, S, L, d, prev):
    rng = cv.rng
    j = e.d["job"]
    when, ans = rel_past(rng, d, ["yesterday", "weekday", "week", "days"])
    fact = rng.choice([f"I got promoted! They made me {j['promo']} {when}.", f"So... you're talking to the new {j['promo']} at {j['place']}. It became official {when}!",
                       f"{cap(when)} my boss called me in and offered me the {j['promo']} position. I said yes!"])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["That's huge! Congratulations! You deserve it so much.", "Yes!! I knew it. We have to celebrate.", "Amazing, congrats! Is it a big change?"])))
    out.append(T(S, rng.choice(["More meetings, more responsibility, a little more money. I'm excited and terrified.", "Thank you! I'm still processing it."])))
    cv.addq("single-hop", rng.choice([f"What position was {S.name} promoted to?", f"What was {S.name} promoted to?"]), [f], j["promo"])
    cv.addq("temporal", f"When did {S.name} get promoted to {j['promo']}?", [f], ans)
    return out


def r_job_change(cv, e, S, L, d, prev):
    rng = cv.rng
    j, nw, reason = e.d["job"], e.d["new"], e.d["reason"]
    when, ans = rel_past(rng, d, ["yesterday", "weekday", "week"])
    fact = rng.choice([f"I quit my job at {j['place']}! I handed in my notice {when}. Honestly, {reason}. I'm starting as {nw['art']} {nw['title']} at {nw['place']}.",
                       f"Big change: I'm leaving {j['place']}. {cap(reason)}, and {when} I accepted an offer to work as {nw['art']} {nw['title']} at {nw['place']}."])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["Whoa, that's a big move! How do you feel?", "Good for you. That's brave.", "I had no idea you were looking! Congrats!"])))
    out.append(T(S, rng.choice(["Nervous but relieved. It was time.", "Mostly excited. A little scared of being the new person again."])))
    n = S.name
    cv.addq("single-hop", rng.choice([f"Why did {n} leave {pos_of(S)} job at {j['place']}?", f"Why did {n} quit {pos_of(S)} job?"]), [f], reason)
    cv.addq("single-hop", f"What is {poss(n)} new job?", [f], f"{nw['title']} at {nw['place']}")
    cv.addq("temporal", f"When did {n} accept {pos_of(S)} new job offer?" if "offer" in fact else f"When did {n} hand in {pos_of(S)} notice?", [f], ans)
    return out


def r_trip_plan(cv, e, S, L, d, prev):
    rng = cv.rng
    c = e.d["city"]
    fact = rng.choice([f"I'm finally planning a trip to {c['city']}! I've wanted to go for years.", f"Guess where I just booked flights to? {c['city']}!",
                       f"I've been reading every blog about {c['city']}. We're going soon and I'm way too excited."])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice([f"{c['city']}! You have to tell me everything when you're back.", "Ah, jealous! Do you have a plan yet?", "That's going to be incredible."])))
    return out


def r_trip_plan_future(cv, e, S, L, d, prev):
    rng = cv.rng
    c = e.d["city"]
    fut = d + dt.timedelta(days=rng.randint(40, 120))
    month = fut.strftime("%B")
    fact = rng.choice([f"I'm already daydreaming about my next trip. I want to go to {c['city']} in {month}.",
                       f"We're thinking {c['city']} for {month}. Have you ever been?",
                       f"Next on my list: {c['city']}. Hoping to make it happen in {month}."])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["Never been, but I've heard amazing things.", "Oh, that's a dream destination.", "Take me with you!"])))
    cv.addq("single-hop", rng.choice([f"Where is {S.name} hoping to travel in {month}?", f"Which city does {S.name} want to visit next?"]), [f], c["city"])
    return out


def r_trip(cv, e, S, L, d, prev):
    rng = cv.rng
    c = e.d["city"]
    comp = e.d["comp"]
    when, ans = rel_past(rng, d, ["yesterday", "weekend", "week", "fewweeks", "days"])
    with_ = f" with {comp[1]}" if comp else ""
    we = "we" if comp else "I"
    fact = rng.choice([f"I just got back from {c['city']}{with_}! {cap(we)} flew home {when} after {e.d['days']} days there.",
                       f"{cap(when)} I got home from {e.d['days']} days in {c['city']}{with_}. Still jet-lagged.",
                       f"So, {c['city']}! {e.d['days']} days{with_}, back home {when}, and I already want to go back.",
                       f"Home from {c['city']} as of {when}. {e.d['days']} days{with_} wasn't nearly enough.",
                       f"I'm back! {c['city']} was everything I hoped. We spent {e.d['days']} days there{with_} and got home {when}." if comp else
                       f"I'm back! {c['city']} was everything I hoped. I spent {e.d['days']} days there and got home {when}."])
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice(["Wait, weren't you traveling?", "Welcome back! How was it?"] + PROMPTS))
    e.turns["fact"] = f
    food = rng.random() < 0.5
    out.append(T(L, rng.choice(["Ahh, welcome back! What did you eat?", "Tell me everything. Was the food amazing?"] if food else
                               ["Tell me everything! What was the best part?", "What was the highlight? I want details."])))
    if food:
        det = T(S, rng.choice([f"The food! I ate {e.d['food']} at least once a day.", f"Honestly the food. I'm still dreaming about the {e.d['food']}."]))
        e.d["dkind"] = "food"
        cv.addq("single-hop", rng.choice([f"What food did {S.name} enjoy in {c['city']}?", f"What did {S.name} eat in {c['city']}?"]), [det], e.d["food"])
        cv.addq("open-domain", f"In which country did {S.name} eat {e.d['food'].split(',')[0]}?", [f, det] if f is not det else [det], c["country"])
    else:
        det = T(S, rng.choice([f"Seeing {e.d['sight']}. I cried a little, not going to lie.", f"We saw {e.d['sight']} and it was even better than the pictures."]))
        e.d["dkind"] = "sight"
        cv.addq("single-hop", rng.choice([f"What was the highlight of {poss(S.name)} trip to {c['city']}?", f"What did {S.name} see in {c['city']}?"]), [det], e.d["sight"])
        cv.addq("open-domain", f"On which continent is the city where {S.name} saw {e.d['sight']}?", [f, det], c["cont"])
    out.append(det)
    e.turns["detail"] = det
    out.append(T(L, rng.choice(["Okay, it's officially on my list.", "That sounds unreal.", "I'm so happy you finally went."])))
    cv.addq("temporal", rng.choice([f"When did {S.name} get back from {c['city']}?", f"When did {S.name} return from {pos_of(S)} trip to {c['city']}?"]), [f], ans)
    cv.addq("single-hop", f"How many days did {S.name} spend in {c['city']}?", [f], str(e.d["days"]))
    if comp:
        cv.addq("single-hop", f"Who did {S.name} travel to {c['city']} with?", [f], comp[1].replace("my ", f"{pos_of(S)} "))
    return out


def r_family(cv, e, S, L, d, prev):
    rng = cv.rng
    w = e.d["what"]
    sib = S.sib
    sp = PRON[sib["g"]]
    n = S.name
    pos = pos_of(S)
    when, ans = rel_past(rng, d, ["yesterday", "weekday", "weekend", "week", "days"])
    if w == "sib_engaged":
        fi = rng.choice(F_NAMES if sib["g"] == "m" else M_NAMES)
        fact = rng.choice([f"My {sib['rel']} {sib['name']} got engaged {when}! {fi} proposed at the top of a Ferris wheel.",
                           f"Family news: {sib['name']} is engaged! {cap(sp['sub'])} and {fi} told us {when} at dinner."])
        e.d["summary"] = f"got engaged to {fi}"
        qs = [("temporal", f"When did {poss(n)} {sib['rel']} get engaged?", ans), ("single-hop", f"Who is {poss(n)} {sib['rel']} engaged to?", fi)]
        react_l = "Congratulations to them! Are you going to be in the wedding?"
    elif w == "parent_birthday":
        gift = rng.choice(GIFTS)
        age = rng.choice([60, 65, 70, 75])
        fact = rng.choice([f"It was my {S.parent}'s {age}th birthday {when}. I gave {('her' if S.parent == 'mom' else 'him')} {gift} and there were happy tears.",
                           f"We celebrated my {S.parent} turning {age} {when}. My gift was {gift}."])
        e.d["summary"] = f"{S.parent}'s {age}th birthday"
        qs = [("single-hop", f"What did {n} give {pos} {S.parent} for {('her' if S.parent == 'mom' else 'his')} birthday?", gift),
              ("temporal", f"When was {poss(n)} {S.parent}'s {age}th birthday?", ans),
              ("single-hop", f"How old did {poss(n)} {S.parent} turn?", str(age))]
        react_l = "That's such a thoughtful gift!"
    elif w == "sib_moved":
        city = rng.choice([c for c in HOME_CITIES if c not in (S.city, cv.A.city, cv.B.city)])
        why = rng.choice(["for a new job", "to be closer to the mountains", "because rent got ridiculous", "to go back to school"])
        fact = rng.choice([f"{sib['name']} moved to {city} {when}, {why}. I helped {sp['obj']} pack the truck.",
                           f"My {sib['rel']} just moved to {city} {why}. The house feels so far away now."])
        e.d["summary"] = f"moved to {city} {why}"
        qs = [("single-hop", f"Where did {poss(n)} {sib['rel']} move to?", city), ("single-hop", f"Why did {poss(n)} {sib['rel']} {sib['name']} move to {city}?", why)]
        react_l = "Aw, you'll miss them. At least now you have a place to visit!"
    elif w == "parent_surgery":
        surg = rng.choice(["knee replacement surgery", "cataract surgery", "a hip replacement", "heart bypass surgery"])
        fact = rng.choice([f"My {S.parent} had {surg} {when}. Everything went fine, but it was a scary day.",
                           f"{cap(when)} was my {S.parent}'s {surg}. I sat in the waiting room for five hours."])
        e.d["summary"] = surg
        qs = [("single-hop", f"What surgery did {poss(n)} {S.parent} have?", surg), ("temporal", f"When did {poss(n)} {S.parent} have surgery?", ans)]
        react_l = f"Oh, I'm so glad it went well. How is {('she' if S.parent == 'mom' else 'he')} recovering?"
    elif w == "sib_baby":
        bn = rng.choice(KID_F + KID_M)
        bg = "girl" if bn in KID_F else "boy"
        fact = rng.choice([f"I'm an aunt now! My {sib['rel']} {sib['name']} had a baby {bg} {when}. {bn}, seven pounds even." if S.g == "f" else
                           f"I'm an uncle now! My {sib['rel']} {sib['name']} had a baby {bg} {when}. {bn}, seven pounds even.",
                           f"{sib['name']}'s baby arrived {when}! A little {bg} named {bn}. I already bought way too many tiny socks."])
        rel = "niece" if bg == "girl" else "nephew"
        e.d["summary"] = f"had a baby {bg}, {bn}"
        qs = [("single-hop", f"What is the name of {poss(n)} new {rel}?", bn), ("temporal", f"When was {poss(n)} {rel} born?", ans)]
        react_l = "Congratulations!! That's the best news."
    elif w == "kid_recital":
        k = S.kids[0]
        inst = rng.choice(["piano", "violin", "flute", "cello"])
        fact = rng.choice([f"{k['name']} had {('her' if k['g'] == 'f' else 'his')} first {inst} recital {when}. I cried through the whole thing.",
                           f"My {k['rel']} played {inst} at the school recital {when}. {cap('she' if k['g'] == 'f' else 'he')} only missed one note!"])
        e.d["summary"] = f"{k['name']} plays {inst}"
        qs = [("single-hop", f"What instrument does {poss(n)} {k['rel']} play?", inst), ("temporal", f"When was {poss(k['name'])} {inst} recital?", ans)]
        react_l = "That's so sweet! You must be so proud."
    elif w == "kid_school":
        k = S.kids[-1]
        subj = rng.choice(["a volcano model", "a report on octopuses", "a poster about the solar system", "a bridge out of popsicle sticks"])
        fact = rng.choice([f"{k['name']} won second place at the school science fair {when} with {subj}.",
                           f"My {k['rel']} made {subj} for the science fair and took second place {when}!"])
        e.d["summary"] = f"{k['name']} took second at the science fair with {subj}"
        qs = [("single-hop", f"What did {poss(n)} {k['rel']} make for the science fair?", subj), ("temporal", f"When did {poss(n)} {k['rel']} {k['name']} win a prize at the science fair?", ans)]
        react_l = "Second place! That's amazing."
    elif w == "kid_sport":
        k = S.kids[0]
        sport = rng.choice(["soccer", "swim team", "gymnastics", "karate", "T-ball"])
        fact = rng.choice([f"{k['name']} started {sport} {when}, and now {('she' if k['g'] == 'f' else 'he')} won't talk about anything else.",
                           f"We signed {k['name']} up for {sport} and the first practice was {when}."])
        e.d["summary"] = f"{k['name']} does {sport}"
        qs = [("single-hop", f"What sport did {poss(n)} {k['rel']} start?", sport), ("temporal", f"When did {k['name']} start {sport}?", ans)]
        react_l = "Oh fun! Is it a big time commitment for you?"
    else:  # anniversary
        pr = S.partner
        yrs = rng.randint(2, 12)
        rest = rng.choice(["a tiny French bistro", "the restaurant where we had our first date", "a rooftop bar downtown", "a cabin by the lake"])
        fact = rng.choice([f"{pr['name']} and I celebrated our {yrs}th anniversary {when} at {rest}.",
                           f"It was our anniversary {when}, {yrs} years! We went to {rest}."])
        e.d["summary"] = f"{yrs}th anniversary"
        qs = [("single-hop", f"Where did {n} and {pos} {pr['rel']} celebrate their anniversary?", rest),
              ("single-hop", f"How many years have {n} and {pr['name']} been together?", str(yrs)),
              ("temporal", f"When did {n} celebrate {pos} anniversary with {pr['name']}?", ans)]
        react_l = "Happy anniversary to you both!"
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice(PROMPTS + ["How's the family?"]))
    e.turns["fact"] = f
    out.append(T(L, react_l))
    if w == "parent_surgery":
        out.append(T(S, rng.choice(["Slowly, but the nurses say right on schedule. I'm staying with them this week.",
                                    "Grumpy about the hospital food, which I'm taking as a good sign."])))
    elif w == "sib_moved":
        out.append(T(S, rng.choice(["True. I'm already planning a visit.", "I know. It's a good move for them, I'm just being sentimental."])))
    else:
        out.append(T(S, rng.choice(["Thanks! It's been a big few weeks for us.", "It really was a special day.", "I know, I'm still smiling about it.",
                                    "Family stuff is always a lot, but good."])))
    for cat, q, a in qs:
        cv.addq(cat, q, [f], a)
    return out


def r_book(cv, e, S, L, d, prev):
    rng = cv.rng
    g, plot, title, author, role = e.d["genre"], e.d["plot"], e.d["title"], e.d["author"], e.d["role"]
    n = S.name
    if role == "read":
        fact = rng.choice([f"I just finished '{title}' by {author}. It's a {g} about {plot}, and I couldn't put it down.",
                           f"I stayed up way too late reading '{title}'. {author} wrote it; it's a {g} about {plot}.",
                           f"Have you read anything by {author}? I'm halfway through '{title}', a {g} about {plot}."])
        qs = [("single-hop", f"What {g} has {n} been reading?", title), ("single-hop", f"Who wrote the {g} that {n} couldn't put down?" if "put down" in fact else f"Who is the author of the {g} {n} has been reading?", author)]
    elif role == "recommend":
        fact = rng.choice([f"You have to read '{title}' by {author}. It's a {g} about {plot}. I'll lend you my copy!",
                           f"Book recommendation for you: '{title}'. {author} is brilliant, and it's this {g} about {plot}."])
        qs = [("single-hop", rng.choice([f"What book did {n} recommend to {L.name}?", f"Which book did {n} suggest {L.name} read?"]), title),
              ("single-hop", f"What is the book {n} recommended about?", plot)]
    else:
        fact = rng.choice([f"My book club picked '{title}' for this month. It's a {g} by {author} about {plot}.",
                           f"We're reading '{title}' for book club — {author}'s {g} about {plot}. The discussion is going to be spicy."])
        qs = [("single-hop", rng.choice([f"What book is {poss(n)} book club reading?", f"Which book did {poss(n)} book club choose?"]), title),
              ("single-hop", f"What is {poss(n)} book club book about?", plot)]
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice(PROMPTS + ["Read anything good lately?"]))
    e.turns["fact"] = f
    lq, sa = rng.choice([("Ooh, that sounds right up my alley.", "You'd love it, I'm sure."), ("Adding it to my list!", "Do it. I'll want to talk about it after."),
                         (f"I've heard of {author}! Is it sad?", "A little sad, but in a good way."), ("Is it long? My attention span is shot.", "It's a quick read, I promise."),
                         ("How does it end? No, wait, don't tell me.", "Ha, my lips are sealed. The ending surprised me, that's all I'll say.")])
    out.append(T(L, lq))
    out.append(T(S, sa))
    for cat, q, a in qs:
        cv.addq(cat, q, [f], a)
    return out


def r_cook(cv, e, S, L, d, prev):
    rng = cv.rng
    (dish, note), occ = e.d["dish"], e.d["occ"]
    when, ans = rel_past(rng, d, ["yesterday", "weekday", "weekend"])
    fact = rng.choice([f"I made {dish} for {occ} {when} — {note}. It actually turned out great!",
                       f"{cap(when)} I cooked {dish} for {occ}, {note}.",
                       f"Kitchen win: {dish} for {occ} {when}. {cap(note)}. Everyone had seconds."])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["Okay, now I'm hungry. Send me the recipe?", "Look at you! I can barely make toast.", "That sounds delicious. Was it hard?"])))
    n = S.name
    o = occ.replace("my ", pos_of(S) + " ").replace("our ", pos_of(S) + " ")
    cv.addq("single-hop", rng.choice([f"What did {n} cook for {o}?", f"What dish did {n} make for {o}?"]), [f], dish)
    return out


def r_restaurant(cv, e, S, L, d, prev):
    rng = cv.rng
    cu, rn = e.d["cuisine"], e.d["rname"]
    comp = e.d["comp"]
    when, ans = rel_past(rng, d, ["yesterday", "weekday", "weekend"])
    fact = rng.choice([f"We tried a new {cu} restaurant called {rn} {when}, me and {comp[1]}. So good.",
                       f"{cap(when)} {comp[1]} and I had dinner at {rn}. First time having {cu} food and now I'm hooked."])
    fact = cap(fact)
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice([f"I've never had {cu} food! What should I order?", f"Ooh, where is {rn}?", "Adding it to my list."])))
    cv.addq("single-hop", rng.choice([f"What {cu} restaurant did {S.name} try?", f"What is the name of the {cu} place {S.name} went to?"]), [f], rn)
    cv.addq("single-hop", f"What kind of food does {rn} serve?", [f], cu)
    return out


def r_comfort(cv, e, S, L, d, prev):
    rng = cv.rng
    food = e.d["food"]
    fact = rng.choice([f"Rough day, so I'm making {food}. It's my ultimate comfort food.",
                       f"Whenever I'm stressed I make {food}. Nothing fixes a bad week faster.",
                       f"Honestly nothing beats {food} when I'm feeling down."])
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice(["How are you doing today, really?"] + PROMPTS))
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["Ooh, good choice. Mine is anything with cheese.", "I'm sorry the day was rough. Enjoy every bite.", "That sounds perfect right now."])))
    cv.addq("single-hop", rng.choice([f"What is {poss(S.name)} go-to comfort food?", f"What does {S.name} eat when stressed?", f"What is {poss(S.name)} favorite comfort food?"]), [f], food)
    return out


def r_injury(cv, e, S, L, d, prev):
    rng = cv.rng
    inj, cause = e.d["inj"], e.d["cause"]
    when, ans = rel_past(rng, d, ["yesterday", "weekday", "weekend", "week", "days"])
    e.d["when_ans"] = ans
    fact = rng.choice([f"I {inj['hurt']} {when}. {cap(cause)}, of all things.",
                       f"So I'm out of commission: {when} I {inj['hurt']} {cause}.",
                       f"Don't laugh, but I {inj['hurt']} {when}. It was from {cause}."])
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice(["How are you?", "Are you okay? You sounded off yesterday."] + PROMPTS))
    e.turns["fact"] = f
    out.append(T(L, f"{react(rng, S, sad=True)} Does it hurt a lot? Did you see a doctor?"))
    out.append(T(S, rng.choice(["The doctor says rest and patience. I'm bad at both.", "It's sore, but I'll live. Lots of ice.", "Yeah, urgent care. Could be worse."])))
    n = S.name
    cv.addq("single-hop", f"How did {n} {inj['q'].format(pos=pos_of(S))}?", [f], cause)
    cv.addq("temporal", f"When did {n} {inj['q'].format(pos=pos_of(S))}?", [f], ans)
    return out


def r_recovery(cv, e, S, L, d, prev):
    rng = cv.rng
    inj, how = e.d["inj"], e.d["how"]
    fact = rng.choice([f"Good news on the health front: my {inj['part']} is finally feeling normal again. {cap(how)} did the trick.",
                       f"My {inj['part']} is so much better! What helped most was {how}."])
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice([f"How's the {inj['part']}?"] + PROMPTS))
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["That's such a relief!", "Finally! I'm so glad.", "Yay! Be careful with it for a while."])))
    cv.addq("single-hop", f"What helped {S.name} recover from {pos_of(S)} {inj['noun']}?", [f], how)
    return out


def r_illness(cv, e, S, L, d, prev):
    rng = cv.rng
    verb, noun = e.d["ill"]
    when, ans = rel_past(rng, d, ["week", "weekend", "fewweeks"])
    fact = rng.choice([f"Sorry I went quiet. I {verb} {when} and was basically in bed for days.", f"I {verb} {when}. Still not a hundred percent."])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, f"{react(rng, S, sad=True)} Are you feeling better now?"))
    out.append(T(S, rng.choice(["Getting there. Lots of soup and bad TV.", "Mostly! Just tired."])))
    cv.addq("single-hop", f"What was {S.name} sick with?", [f], noun)
    cv.addq("temporal", f"When was {S.name} sick with {noun}?", [f], ans)
    return out


def r_checkup(cv, e, S, L, d, prev):
    rng = cv.rng
    finding, change, q = e.d["chk"]
    when, ans = rel_past(rng, d, ["weekday", "week", "yesterday"])
    fact = rng.choice([f"I had my annual checkup {when} and the doctor said {finding}. So now I'm {change}.",
                       f"Doctor's appointment {when}: turns out {finding}. I'm {change} now."])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["Good for you for taking it seriously.", "At least you caught it early.", "That's a good wake-up call."])))
    cv.addq("single-hop", fill(q, S=S.name, pos=pos_of(S)), [f], finding)
    return out


def r_hobby_start(cv, e, S, L, d, prev):
    rng = cv.rng
    h = e.d["h"]
    when, ans = rel_past(rng, d, ["weekday", "week", "yesterday", "days"])
    fact = rng.choice([f"I signed up for {h['cls']} at {h['where']}! The first session was {when}.",
                       f"New hobby alert: {h['h']}. I started {h['cls']} {when} at {h['where']}.",
                       f"I finally did something for myself: {h['cls']}, {when}, at {h['where']}. I was terrible and loved it."])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["That's so fun! How was the first class?", "I love that for you. Is the teacher nice?", "Ooh, I've always wanted to try that."])))
    out.append(T(S, rng.choice(["Everyone else seemed to know what they were doing, ha. But the teacher is lovely.", "Harder than it looks! I'm going back next week.",
                                "I was the worst one there and had the best time."])))
    cv.addq("temporal", rng.choice([f"When did {S.name} start {h['cls']}?", f"When did {S.name} take up {h['h']}?"]), [f], ans)
    cv.addq("single-hop", f"Where did {S.name} sign up for {h['cls']}?", [f], h["where"])
    return out


def r_hobby_art(cv, e, S, L, d, prev):
    rng = cv.rng
    h, art = e.d["h"], e.d["art"]
    fact = rng.choice([f"Update from {h['h']}: I finished {art}! It's not perfect but I'm proud of it.",
                       f"Remember my {h['h']} thing? This week I finally finished {art}."])
    out, f = intro_turns(rng, S, L, prev, fact, rng.choice(PROMPTS + [f"How's the {h['h']} going?"]))
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["Show me!! I bet it's great.", "That's amazing progress.", "Look at you go!"])))
    cv.addq("single-hop", fill(h["q"], S=S.name, pos=pos_of(S)), [f], art)
    return out


def r_instrument(cv, e, S, L, d, prev):
    rng = cv.rng
    inst, teacher = e.d["inst"], e.d["teacher"]
    fact = rng.choice([f"I've been teaching myself the {inst} with {teacher}. My neighbors must hate me.",
                       f"Random, but I'm learning to play the {inst}! I practice every night with {teacher}.",
                       f"I bought a secondhand {inst} and I'm learning from {teacher}. My fingers hurt."])
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, rng.choice(["Play me something next time!", "No way, that's so cool. Can you play a song yet?", "Music is such a good hobby."])))
    cv.addq("single-hop", rng.choice([f"What instrument is {S.name} learning?", f"Which instrument did {S.name} start playing?"]), [f], inst)
    cv.addq("single-hop", f"How is {S.name} learning the {inst}?", [f], teacher)
    return out


# --------------------------------------------------------------------------------------
# Storylines: one long arc per speaker, over four or five sessions
# --------------------------------------------------------------------------------------

def sl_adopt(rng, P):
    reason = rng.choice(["I volunteered at a foster care center for years, and seeing those kids wait for a family stuck with me",
                         "my parents fostered kids when I was growing up, so I always knew I wanted to give a child a home",
                         "I was adopted myself, and I want to give another kid the chance my parents gave me"])
    return [Ev("storyline", arc="adopt", stage=k, reason=reason, child=rng.choice(KID_F + KID_M), age=rng.randint(3, 8)) for k in range(4)]


def sl_marathon(rng, P):
    reason = rng.choice(["my aunt went through chemo last year and I'm raising money for the cancer center that treated her",
                         "I turned forty and wanted to prove to myself I could still do hard things",
                         "I lost a bet with my coworker, honestly, but now I'm kind of excited"])
    return [Ev("storyline", arc="marathon", stage=k, reason=reason, race=rng.choice(["the Lakeshore Marathon", "the Riverbend Marathon", "the City Marathon"]),
               miles=rng.choice([16, 18, 20]), half=rng.choice(["1:58", "2:04", "2:11"]), full=rng.choice(["4:12", "4:31", "4:47"])) for k in range(4)]


def sl_bakery(rng, P):
    reason = rng.choice(["my grandma's recipes deserve better than sitting in a shoebox", "I've been baking for friends for years and they keep saying I should sell",
                         "I'm tired of working for someone else"])
    return [Ev("storyline", arc="bakery", stage=k, reason=reason, street=rng.choice(["Elm Street", "Water Street", "Fourth Avenue"]),
               item=rng.choice(["cardamom buns", "sourdough loaves", "chocolate croissants"])) for k in range(4)]


def sl_move(rng, P):
    city = rng.choice([c for c in HOME_CITIES if c != P.city])
    reason = rng.choice([(f"{P.partner['name']} got a job offer there that was too good to turn down" if P.partner else "I got a job offer there that was too good to turn down"),
                         f"my {P.parent} is getting older and I want to be closer", "I want a fresh start somewhere new"])
    return [Ev("storyline", arc="move", stage=k, reason=reason, city=city, hood=rng.choice(["near a big park", "walking distance from downtown", "with a little backyard"])) for k in range(4)]


def sl_school(rng, P):
    field = rng.choice(["public health", "social work", "data science", "urban planning", "nursing"])
    reason = rng.choice(["I've hit a ceiling at work without the degree", "I want to do work that actually helps people", "I've been curious about it for years"])
    return [Ev("storyline", arc="school", stage=k, reason=reason, field=field, univ=rng.choice(["Ridgemont University", "the state university", "Lakeview College"]),
               hard=rng.choice(["statistics", "research methods", "policy writing"]), topic=rng.choice(["food deserts in small towns", "why people skip follow-up appointments", "bike lanes and traffic injuries"])) for k in range(4)]


def sl_novel(rng, P):
    reason = rng.choice(["my grandfather's stories deserve to be written down", "I've had this idea in my head since college", "writing is the only thing that calms my brain"])
    return [Ev("storyline", arc="novel", stage=k, reason=reason, premise=rng.choice(["a lighthouse keeper who finds letters from the future", "two rival bakers in a small town",
                                                                                      "a girl who runs away to join a traveling circus"]),
               words=rng.choice(["82,000", "95,000", "70,000"])) for k in range(4)]


def sl_spanish(rng, P):
    reason = rng.choice([(f"{P.partner['name']}'s whole family speaks Spanish and I want to talk to them properly" if P.partner else "my new coworkers speak Spanish and I feel left out"),
                         "I'm going to volunteer at a clinic in Guatemala next year", "I always regretted dropping it in high school"])
    return [Ev("storyline", arc="spanish", stage=k, reason=reason, teacher=rng.choice(["Lucía", "Marisol", "Diego"])) for k in range(4)]


def sl_garden(rng, P):
    reason = rng.choice(["the empty lot on our block has been a dumping ground for years", "I want the kids on my street to know where food comes from",
                         "our neighborhood doesn't have a grocery store with decent vegetables"])
    return [Ev("storyline", arc="garden", stage=k, reason=reason, beds=rng.choice([8, 12, 16]), crop=rng.choice(["tomatoes and zucchini", "lettuce and radishes", "pumpkins"])) for k in range(4)]


STORYLINES = {"adopt": sl_adopt, "marathon": sl_marathon, "bakery": sl_bakery, "move": sl_move, "school": sl_school,
              "novel": sl_novel, "spanish": sl_spanish, "garden": sl_garden}


def r_storyline(cv, e, S, L, d, prev):
    rng = cv.rng
    x = e.d
    arc, k, reason = x["arc"], x["stage"], x["reason"]
    n, pos = S.name, pos_of(S)
    when, ans = rel_past(rng, d, ["yesterday", "weekday", "weekend", "week"])
    x["when_ans"] = ans
    qs = []
    if arc == "adopt":
        if k == 0:
            fact = rng.choice([f"Can I tell you something big? I've started researching adoption agencies. Honestly, {reason}.",
                               f"So I've been looking into adopting a child. {cap(reason)}. I spent last night reading about different agencies.",
                               f"I reached out to a couple of agencies about adopting. {cap(reason)}, and I'm finally ready."])
            qs = [("single-hop", rng.choice([f"Why did {n} start researching adoption agencies?", f"What made {n} want to adopt a child?", f"Why is {n} interested in adoption?"]), reason)]
            lr = "Oh wow, that's huge. You'd be an incredible parent."
        elif k == 1:
            fact = rng.choice([f"Adoption update: we finished the home study {when}. A social worker went through every room, even the junk drawer.",
                               f"{cap(when)} was our home study for the adoption. I cleaned for three days straight."])
            qs = [("single-hop", f"What step in the adoption process did {n} complete recently?", "the home study"), ("temporal", f"When was {poss(n)} adoption home study?", ans)]
            lr = "How did it go? I'd be so nervous."
        elif k == 2:
            fact = rng.choice([f"We got approved as adoptive parents {when}! I screamed in the car.", f"The agency called {when}: we're officially approved to adopt!"])
            qs = [("temporal", f"When was {n} approved to adopt?", ans)]
            lr = "I'm so happy for you!! What happens next?"
        else:
            fact = rng.choice([f"We've been matched with {a_an(str(x['age']) + '-year-old')} named {x['child']}. We met for the first time {when} and {x['child']} showed me every single toy.",
                               f"{cap(when)} we met {x['child']}, the {x['age']}-year-old we've been matched with. I'm already in love."])
            qs = [("single-hop", f"Who has {n} been matched with through the adoption agency?", f"{x['child']}, age {x['age']}"),
                  ("temporal", f"When did {n} first meet {x['child']}?", ans)]
            lr = "I'm crying. That's the best news ever."
    elif arc == "marathon":
        if k == 0:
            fact = rng.choice([f"I signed up for {x['race']}! Honestly, {reason}.", f"Okay, I did it, I registered for a marathon, {x['race']}. {cap(reason)}."])
            qs = [("single-hop", rng.choice([f"Why did {n} sign up for a marathon?", f"What motivated {n} to register for {x['race']}?"]), reason)]
            lr = "A whole marathon?! You're amazing. How are you going to train?"
        elif k == 1:
            fact = rng.choice([f"I ran {x['miles']} miles {when}. Longest training run of my life!", f"{cap(when)} was my long run: {x['miles']} miles without stopping."])
            qs = [("single-hop", f"How far was {poss(n)} longest training run?", f"{x['miles']} miles"), ("temporal", f"When did {n} run {x['miles']} miles?", ans)]
            lr = "That's incredible. Were you sore afterward?"
        elif k == 2:
            fact = rng.choice([f"I ran a half marathon as a warm-up race {when} and finished in {x['half']}.", f"{cap(when)} I did my first half marathon! {x['half']}, which I'm thrilled with."])
            qs = [("single-hop", f"What was {poss(n)} half marathon time?", x["half"]), ("temporal", f"When did {n} run a half marathon?", ans)]
            lr = "That's such a good time! You're ready."
        else:
            fact = rng.choice([f"I finished {x['race']} {when}! {x['full']}. I cried at mile twenty-four and again at the finish.",
                               f"Marathon done!! {cap(when)}, {x['full']}. My legs are furious with me."])
            qs = [("single-hop", f"What was {poss(n)} finishing time in {x['race']}?", x["full"]), ("temporal", f"When did {n} run {x['race']}?", ans)]
            lr = "YOU DID IT! I'm so proud of you."
    elif arc == "bakery":
        if k == 0:
            fact = rng.choice([f"I'm seriously thinking about opening my own bakery. {cap(reason)}.", f"Don't laugh: I want to open a bakery. {cap(reason)}."])
            qs = [("single-hop", rng.choice([f"Why does {n} want to open a bakery?", f"What made {n} think about starting a bakery?"]), reason)]
            lr = "I'm not laughing, I'm already your first customer!"
        elif k == 1:
            fact = rng.choice([f"Bakery update: I wrote a full business plan and met with the bank about a small-business loan {when}.",
                               f"{cap(when)} I pitched my bakery business plan to a loan officer. She said it was solid!"])
            qs = [("single-hop", f"What did {n} do to fund {pos} bakery?", "wrote a business plan and met the bank about a small-business loan"),
                  ("temporal", f"When did {n} meet with the bank about {pos} bakery?", ans)]
            lr = "That's such a real step. How did it feel?"
        elif k == 2:
            fact = rng.choice([f"We signed the lease {when}! The bakery will be in a little storefront on {x['street']}.", f"I have keys! The bakery space on {x['street']} is officially mine as of {when}."])
            qs = [("single-hop", f"Where is {poss(n)} bakery located?", x["street"]), ("temporal", f"When did {n} sign the lease for {pos} bakery?", ans)]
            lr = "Keys! This is really happening!"
        else:
            fact = rng.choice([f"Opening day was {when} and we sold out of {x['item']} by noon!", f"The bakery opened {when}. Line out the door, and the {x['item']} were gone in two hours."])
            qs = [("single-hop", f"What sold out on {poss(n)} bakery's opening day?", x["item"]), ("temporal", f"When did {poss(n)} bakery open?", ans)]
            lr = "I'm so proud of you. Save me a bun next time!"
    elif arc == "move":
        if k == 0:
            fact = rng.choice([f"We're moving to {x['city']}! {cap(reason)}.", f"Big news, I'm leaving {S.city}. Moving to {x['city']} because {reason}."])
            qs = [("single-hop", rng.choice([f"Why is {n} moving to {x['city']}?", f"What is the reason for {poss(n)} move?"]), reason),
                  ("single-hop", f"Where is {n} moving?", x["city"])]
            lr = "Whoa! I'll miss you, but that's exciting."
        elif k == 1:
            fact = rng.choice([f"House hunting in {x['city']} {when} was brutal. We toured nine places and applied for a two-bedroom {x['hood']}.",
                               f"{cap(when)} we found an apartment in {x['city']}, a two-bedroom {x['hood']}. Fingers crossed on the application."])
            qs = [("single-hop", f"What kind of place did {n} apply for in {x['city']}?", f"a two-bedroom {x['hood']}")]
            lr = "That sounds perfect. I hope you get it!"
        elif k == 2:
            fact = rng.choice([f"Moving day was {when}. I never want to see another cardboard box.", f"We officially moved to {x['city']} {when}. Everything hurts."])
            qs = [("temporal", f"When did {n} move to {x['city']}?", ans)]
            lr = "You survived! How does the new place feel?"
        else:
            fact = rng.choice([f"{x['city']} is starting to feel like home. I joined a running club and found a coffee shop where they know my order.",
                               f"I think I love {x['city']}. Found a running club and the neighbors brought us cookies."])
            qs = [("single-hop", f"What has helped {n} settle into {x['city']}?", "a running club and a regular coffee shop / friendly neighbors")]
            lr = "That makes me so happy to hear."
    elif arc == "school":
        if k == 0:
            fact = rng.choice([f"I'm applying to a master's program in {x['field']}. Honestly, {reason}.", f"So I'm going back to school, or trying to. Master's in {x['field']}, because {reason}."])
            qs = [("single-hop", f"Why does {n} want to get a master's degree?", reason), ("single-hop", f"What is {n} going to study?", x["field"])]
            lr = "That's a big decision! You'd be great."
        elif k == 1:
            fact = rng.choice([f"I got accepted into the {x['field']} program at {x['univ']} {when}!", f"{cap(when)} I got the email: I'm in! {x['univ']}, {x['field']}."])
            qs = [("temporal", f"When did {n} get accepted into grad school?", ans), ("single-hop", f"Which school accepted {n}?", x["univ"])]
            lr = "I knew it!! Congratulations!"
        elif k == 2:
            fact = rng.choice([f"First weeks of grad school done. {cap(x['hard'])} is brutal; I spent six hours on one problem set.",
                               f"Grad school is great except {x['hard']}, which is eating my life."])
            qs = [("single-hop", f"Which class is {n} finding hardest?", x["hard"])]
            lr = "You'll get it. Do they have tutoring?"
        else:
            fact = rng.choice([f"I presented my thesis proposal {when}. It's on {x['topic']}.", f"{cap(when)} I defended my thesis proposal about {x['topic']} and they approved it!"])
            qs = [("single-hop", f"What is {poss(n)} thesis about?", x["topic"]), ("temporal", f"When did {n} present {pos} thesis proposal?", ans)]
            lr = "That's such an interesting topic!"
    elif arc == "novel":
        if k == 0:
            fact = rng.choice([f"I started writing a novel. It's about {x['premise']}. Honestly, {reason}.", f"Secret project: I'm writing a book! {cap(x['premise'])}. {cap(reason)}."])
            qs = [("single-hop", f"What is {poss(n)} novel about?", x["premise"]), ("single-hop", f"Why did {n} start writing a novel?", reason)]
            lr = "You're writing a book?! I need to read it."
        elif k == 1:
            fact = rng.choice([f"I finished the first draft {when}! {x['words']} words.", f"{cap(when)} I typed 'The End'. First draft: {x['words']} words."])
            qs = [("temporal", f"When did {n} finish the first draft of {pos} novel?", ans), ("single-hop", f"How long is {poss(n)} first draft?", f"{x['words']} words")]
            lr = "That's incredible! How does it feel?"
        elif k == 2:
            fact = rng.choice(["My writing group tore chapter three apart, but they were right. I'm rewriting the whole middle.",
                               "I shared the draft with my writing group and they said the middle drags. Rewriting now."])
            qs = [("single-hop", f"What feedback did {poss(n)} writing group give?", "chapter three / the middle drags; rewrite")]
            lr = "Oof, but good feedback is a gift."
        else:
            fact = rng.choice([f"An agent asked for my full manuscript {when}!", f"{cap(when)} a literary agent emailed asking to read the whole manuscript!"])
            qs = [("temporal", f"When did an agent ask to read {poss(n)} manuscript?", ans)]
            lr = "AHH! That's huge!"
    elif arc == "spanish":
        if k == 0:
            fact = rng.choice([f"I started Spanish lessons! Honestly, {reason}.", f"¡Hola! I'm learning Spanish, finally. {cap(reason)}."])
            qs = [("single-hop", rng.choice([f"Why is {n} learning Spanish?", f"Why did {n} start taking Spanish lessons?"]), reason)]
            lr = "¡Qué bien! How's it going so far?"
        elif k == 1:
            fact = rng.choice([f"My tutor {x['teacher']} says my accent is improving. We meet twice a week now.", f"Spanish update: I have a tutor, {x['teacher']}, and she makes me talk about my day for an hour."])
            qs = [("single-hop", f"Who is {poss(n)} Spanish tutor?", x["teacher"])]
            lr = "That's the best way to learn."
        elif k == 2:
            fact = rng.choice([f"I had my first full conversation in Spanish {when}! Twenty minutes, no English.", f"{cap(when)} I ordered, chatted and paid entirely in Spanish. Tiny win!"])
            qs = [("temporal", f"When did {n} have {pos} first full conversation in Spanish?" if "conversation" in fact else f"When did {n} manage to order entirely in Spanish?", ans)]
            lr = "That's not tiny, that's huge!"
        else:
            fact = rng.choice([f"I passed the B1 Spanish exam {when}!", f"{cap(when)} I got my B1 certificate in Spanish."])
            qs = [("single-hop", f"Which Spanish exam did {n} pass?", "B1"), ("temporal", f"When did {n} pass {pos} Spanish exam?", ans)]
            lr = "¡Felicidades! So proud of you."
    else:  # garden
        if k == 0:
            fact = rng.choice([f"A few neighbors and I want to turn the empty lot on our block into a community garden. {cap(reason)}.",
                               f"New project: a community garden! {cap(reason)}."])
            qs = [("single-hop", f"Why does {n} want to start a community garden?", reason)]
            lr = "I love that. How do you even start something like that?"
        elif k == 1:
            fact = rng.choice([f"The city approved our garden permit {when}!", f"{cap(when)} the permit for the community garden came through!"])
            qs = [("temporal", f"When did {poss(n)} community garden get its permit?", ans)]
            lr = "Finally! Now the fun part."
        elif k == 2:
            fact = rng.choice([f"We built {x['beds']} raised beds {when}. Twenty volunteers showed up!", f"{cap(when)} was build day: {x['beds']} raised beds in one afternoon."])
            qs = [("single-hop", f"How many raised beds did {poss(n)} garden group build?", str(x["beds"])), ("temporal", f"When did {n} build the raised beds?", ans)]
            lr = "That's so many! You must be exhausted."
        else:
            fact = rng.choice([f"First harvest from the community garden {when}: {x['crop']}. The kids went wild.", f"We harvested {x['crop']} from the garden {when}!"])
            qs = [("single-hop", f"What did {poss(n)} community garden harvest first?", x["crop"])]
            lr = "That's the best feeling."
    out, f = intro_turns(rng, S, L, prev, fact)
    e.turns["fact"] = f
    out.append(T(L, lr))
    out.append(T(S, rng.choice(["Thanks. It means a lot that you're excited with me.", "I'll keep you posted!", "One step at a time.", "I'm trying not to get ahead of myself."])))
    for cat, q, a in qs:
        cv.addq(cat, q, [f], a)
    return out


def agg_story(cv, P, sl):
    """Multi-hop and open-domain questions over a storyline's stages."""
    n, p = P.name, P.p
    arc = sl[0].d["arc"]
    f = [e.turns["fact"] for e in sl]
    if arc == "adopt":
        cv.addq("multi-hop", f"What steps has {n} taken toward adopting a child?", f[1:3], "home study, then approval as adoptive parents")
        cv.addq("multi-hop", f"Why did {n} decide to adopt, and who was {p['sub']} matched with?", [f[0], f[3]], f"{sl[0].d['reason']}; {sl[3].d['child']}")
        cv.addq("open-domain", f"Would {n} be supportive of a friend who wanted to foster a child?", [f[0]], "Likely yes")
    elif arc == "marathon":
        cv.addq("multi-hop", f"How did {n} train for {sl[0].d['race']}?", f[1:3], f"a {sl[0].d['miles']}-mile long run and a half marathon in {sl[0].d['half']}")
        cv.addq("multi-hop", f"Why did {n} run a marathon, and how did it go?", [f[0], f[3]], f"{sl[0].d['reason']}; finished in {sl[0].d['full']}")
        cv.addq("open-domain", f"Would {n} likely sign up for another endurance race?", [f[0], f[3]], "Likely yes")
    elif arc == "bakery":
        cv.addq("multi-hop", f"What steps did {n} take to open {p['pos']} bakery?", f[1:4], "business plan and loan meeting, signed lease, opened")
        cv.addq("open-domain", f"Does {n} enjoy baking?", [f[0], f[3]], "Yes")
    elif arc == "move":
        cv.addq("multi-hop", f"Why did {n} move to {sl[0].d['city']}, and when did {p['sub']} move?", [f[0], f[2]], f"{sl[0].d['reason']}; {sl[2].d['when_ans']}")
        cv.addq("open-domain", f"Does {n} still live in {P.city}?", [f[0], f[2]], f"No, {p['sub']} moved to {sl[0].d['city']}")
    elif arc == "school":
        cv.addq("multi-hop", f"What is {n} studying in grad school, and where?", [f[0], f[1]], f"{sl[0].d['field']} at {sl[0].d['univ']}")
        cv.addq("open-domain", f"Does {n} value continuing education?", [f[0], f[1]], "Yes")
    elif arc == "novel":
        cv.addq("multi-hop", f"What progress has {n} made on {p['pos']} novel?", f[1:4], "finished a draft, revised after writing group feedback, an agent asked for the manuscript")
        cv.addq("open-domain", f"Would {n} be interested in a creative writing workshop?", [f[0], f[2]], "Likely yes")
    elif arc == "spanish":
        cv.addq("multi-hop", f"How has {poss(n)} Spanish been progressing?", f[1:4], "tutor, first conversation, passed B1")
        cv.addq("open-domain", f"Could {n} probably get by on a trip to Mexico?", [f[2], f[3]], "Likely yes, B1 Spanish")
    else:
        cv.addq("multi-hop", f"How did {poss(n)} community garden come together?", f[1:4], "permit approved, raised beds built, first harvest")
        cv.addq("open-domain", f"Does {n} care about {p['pos']} neighborhood?", [f[0], f[2]], "Yes")


STORY_AGG = {k: agg_story for k in STORYLINES}

# --------------------------------------------------------------------------------------
# Sampling, output, checks
# --------------------------------------------------------------------------------------

QUOTA = {"single-hop": 92, "multi-hop": 45, "temporal": 44, "open-domain": 22}


def resolve(t):
    while "alias" in t:
        t = t["alias"]
    return t


def build(seed, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    all_q = []
    convs = []
    for c in range(N_CONVS):
        rng = random.Random(seed * 1000 + c)
        cv = Conv(c, rng)
        cv.plan()
        cv.render()
        convs.append(cv)
        sid = f"conv-{c + 1}"
        with open(os.path.join(out_dir, f"{sid}.jsonl"), "w", encoding="utf-8") as fh:
            for sess in cv.sessions:
                for t in sess:
                    ts = int(t["ts"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
                    rec = {"type": "dialog", "ts_ms": ts, "session_id": sid, "speaker": t["speaker"], "dia_id": t["dia_id"], "text": t["text"]}
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        # questions: dedupe, then sample each category down to its quota
        seen = set()
        qs = []
        for q in cv.questions:
            if q["question"] in seen:
                continue
            seen.add(q["question"])
            ev = []
            for t in q["ev"]:
                i = resolve(t)["dia_id"]
                if i not in ev:
                    ev.append(i)
            qs.append(dict(conv=sid, question=q["question"], evidence=ev, category=q["category"], answer=q["answer"]))
        picked = []
        for cat, k in QUOTA.items():
            xs = [q for q in qs if q["category"] == cat]
            picked += xs if len(xs) <= k else rng.sample(xs, k)
        order = {id(q): i for i, q in enumerate(qs)}
        picked.sort(key=lambda q: order[id(q)])
        all_q += picked
    with open(os.path.join(out_dir, "questions.jsonl"), "w", encoding="utf-8") as fh:
        for q in all_q:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    return convs, all_q


WORD = re.compile(r"[^\W_]+")
STOP = set("a an the of to in on at for with and or but is are was were be been being do does did has have had what when where who whom which why how "
           "that this these those it its his her their there s he she they them him i my me you your we our us about from by as into than then so "
           "if would could should can will may might not no yes up out more most".split())


def norm(w):
    """A crude stem, only for the statistics below (hike/hiking/hiked, pet/pets, adopt/adoption)."""
    for suf in ("ations", "ation", "ings", "ing", "ied", "ies", "ions", "ion", "ed", "es", "s"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)] + ("y" if suf in ("ied", "ies") else "")
            break
    return w[:-1] if w.endswith("e") and len(w) > 3 else w


def check_and_stats(out_dir, all_q, show, seed):
    recs = {}
    nturns = 0
    words = []
    for fn in sorted(os.listdir(out_dir)):
        if fn.startswith("conv-") and fn.endswith(".jsonl"):
            conv = fn[:-6]
            with open(os.path.join(out_dir, fn), encoding="utf-8") as fh:
                for line in fh:
                    r = json.loads(line)
                    recs[(conv, r["dia_id"])] = r
                    nturns += 1
                    words.append(len(WORD.findall(r["text"])))
    bad = [(q["conv"], e) for q in all_q for e in q["evidence"] if (q["conv"], e) not in recs]
    if bad:
        print(f"ERROR: {len(bad)} evidence ids do not exist, e.g. {bad[:5]}", file=sys.stderr)
        sys.exit(1)
    one_session = [q["question"] for q in all_q if q["category"] == "multi-hop" and len({e.split(":")[0] for e in q["evidence"]}) < 2]
    if one_session:
        print(f"ERROR: {len(one_session)} multi-hop questions have evidence from one session only, e.g. {one_session[:3]}", file=sys.stderr)
        sys.exit(1)
    cats = {}
    for q in all_q:
        cats[q["category"]] = cats.get(q["category"], 0) + 1
    # lexical gap: the question's content words, verbatim in the evidence, only in another form, or not there
    verb = other = absent = 0
    q_other = 0
    for q in all_q:
        qw = [w for w in WORD.findall(q["question"].lower()) if w not in STOP]
        ew = set()
        for e in q["evidence"]:
            r = recs[(q["conv"], e)]
            ew |= set(WORD.findall((r["text"] + " " + r["speaker"]).lower()))
        es = {norm(w) for w in ew}
        o = 0
        for w in qw:
            if w in ew:
                verb += 1
            elif norm(w) in es:
                other += 1
                o += 1
            else:
                absent += 1
        q_other += o > 0
    tot = verb + other + absent
    per_conv = {}
    for (c, _) in recs:
        per_conv[c] = per_conv.get(c, 0) + 1
    nev = [len(q["evidence"]) for q in all_q]
    print(f"conversations: {len(per_conv)}, turns: {nturns} ({min(per_conv.values())}-{max(per_conv.values())} per conversation)")
    print(f"words per turn: mean {sum(words) / len(words):.1f}, min {min(words)}, max {max(words)}")
    print(f"questions: {len(all_q)} — " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    print(f"evidence turns per question: mean {sum(nev) / len(nev):.2f}, max {max(nev)}; all {sum(nev)} evidence ids exist; "
          f"every multi-hop question's evidence spans 2 or more sessions")
    print(f"question content words (stop words aside): {100 * verb / tot:.0f}% verbatim in the evidence turns, {100 * other / tot:.0f}% there only in "
          f"another form (hike/hiking, pet/pets), {100 * absent / tot:.0f}% not there; questions with a word only in another form: "
          f"{q_other} ({100 * q_other / len(all_q):.0f}%)")
    if show:
        r = random.Random(seed + show)
        for q in r.sample(all_q, show):
            print(f"\n[{q['conv']} {q['category']}] {q['question']}  ->  {q['answer']}")
            for e in q["evidence"]:
                rec = recs[(q["conv"], e)]
                print(f"    {e} {rec['speaker']}: {rec['text']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--show", type=int, default=0, help="print N random questions with their evidence turns")
    a = ap.parse_args()
    t0 = time.time()
    _, all_q = build(a.seed, a.out)
    check_and_stats(a.out, all_q, a.show, a.seed)
    print(f"wrote {a.out} in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
