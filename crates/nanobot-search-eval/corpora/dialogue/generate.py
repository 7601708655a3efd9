#!/usr/bin/env python3
"""The conversational search corpus (issue 31): long chats between two or three people over
months of sessions, and questions labelled with the turns that answer them.

Written for this repository from scratch; no sentence comes from a public benchmark. The
questions are phrased as people ask about a friend's life ("When did Maria ...", "What
breed ...", "Which city ..."), not from the search implementation: they use other word
forms than the turns (painted / paintings), other words (paraphrase), name the speaker
whose fact it is while the other speaker has facts of the same kind, and some need two
turns (a question and its answer).

Output (deterministic, seed 31): `sessions/<conversation>.jsonl` in nanobot-ai's session
line format (one session per conversation, one message per turn, `"Name: text"`, the
session's date as each message's timestamp) and `queries.json`: id, kind, split (`tune`
for the first third of the conversations, `report` for the rest), query, relevant sources
(`session:<key>#<seq>`). Run it again after editing; it checks its own labels.
"""

import json
import os
import random
import re
from datetime import datetime, timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = random.Random(31)

PEOPLE = [
    ("Maria", "she"), ("Jonas", "he"), ("Priya", "she"), ("Tomasz", "he"), ("Aiko", "she"),
    ("Kwame", "he"), ("Lucia", "she"), ("Dmitri", "he"), ("Fatima", "she"), ("Oliver", "he"),
    ("Ines", "she"), ("Rafael", "he"), ("Chloe", "she"), ("Mateo", "he"), ("Zanele", "she"),
    ("Henrik", "he"), ("Yara", "she"), ("Samir", "he"), ("Greta", "she"), ("Emeka", "he"),
    ("Nadia", "she"), ("Liam", "he"), ("Sofia", "she"), ("Kenji", "he"), ("Amara", "she"),
    ("Bruno", "he"), ("Leila", "she"), ("Arjun", "he"), ("Elena", "she"), ("Tobias", "he"),
    ("Mei", "she"), ("Diego", "he"), ("Hana", "she"), ("Victor", "he"), ("Noor", "she"),
    ("Felix", "he"), ("Rosa", "she"), ("Omar", "he"), ("Astrid", "she"), ("Pavel", "he"),
]

POSS = {"she": "her", "he": "his"}

CITIES = ["Lisbon", "Kyoto", "Reykjavik", "Marrakesh", "Vancouver", "Tallinn", "Cape Town",
          "Hanoi", "Valparaiso", "Edinburgh", "Ljubljana", "Oaxaca", "Tbilisi", "Bergen",
          "Porto", "Seville", "Krakow", "Montreal", "Queenstown", "Istanbul", "Nairobi",
          "Cusco", "Sapporo", "Dubrovnik"]
PETS = [("puppy", "dog", ["beagle mix", "border collie", "golden retriever", "dachshund",
                          "greyhound", "corgi"]),
        ("kitten", "cat", ["tabby", "Maine Coon", "Siamese", "ginger shorthair",
                           "Russian Blue", "calico"]),
        ("rabbit", "rabbit", ["Holland Lop", "Rex", "Lionhead", "Dutch"])]
PET_NAMES = ["Biscuit", "Pepper", "Mochi", "Juniper", "Waffles", "Ziggy", "Clementine",
             "Nacho", "Luna", "Pickles", "Bramble", "Otis", "Saffron", "Tofu", "Ruby",
             "Maple", "Gizmo", "Olive"]
INSTRUMENTS = ["cello", "ukulele", "saxophone", "drums", "violin", "banjo", "piano",
               "trumpet", "harp", "accordion", "flute", "bass guitar"]
SPORTS = [("half marathon", "ran"), ("triathlon", "finished"), ("rock climbing competition", "entered"),
          ("charity cycling race", "rode in"), ("open water swim", "swam in"),
          ("chess tournament", "played in"), ("tennis league final", "played in"),
          ("trail race", "ran")]
DISHES = ["mushroom risotto", "lamb tagine", "vegetable lasagna", "pho", "shakshuka",
          "paella", "butter chicken", "ramen from scratch", "sourdough bread", "pierogi",
          "a lemon tart", "empanadas", "green curry", "gnocchi", "banana bread", "dumplings"]
JOBS = ["project manager", "nurse", "data analyst", "high school teacher", "architect",
        "physiotherapist", "graphic designer", "software tester", "paramedic", "librarian",
        "marine biologist", "sous chef", "translator", "electrician"]
COMPANIES = ["a small design studio", "the city hospital", "a solar energy startup",
             "the regional library", "a logistics company", "a children's museum",
             "an engineering firm", "a nonprofit for refugees", "a bakery chain",
             "the national park service"]
ART = [("watercolor", "painted", "a lighthouse at dusk"), ("oil", "painted", "a field of sunflowers"),
       ("acrylic", "painted", "my grandmother's kitchen"), ("charcoal", "drew", "a portrait of my brother"),
       ("pottery", "made", "a set of blue mugs"), ("linocut", "carved", "a fox in the snow"),
       ("watercolor", "painted", "the harbour at sunrise"), ("oil", "painted", "a stormy sea")]
BOOKS = [("a mystery novel", "The Salt Archive"), ("a memoir", "Rivers I Have Known"),
         ("a science fiction book", "The Glass Orbit"), ("a history of the Silk Road", "Caravans"),
         ("a fantasy series", "The Ember Crown"), ("a book about habits", "Small Hinges"),
         ("a poetry collection", "Paper Lanterns"), ("a cookbook", "Salt and Smoke"),
         ("a biography of a chess champion", "Sixty-Four Squares"), ("a thriller", "Last Ferry")]
COURSES = ["Japanese", "Portuguese", "sign language", "Italian", "Korean", "Arabic",
           "woodworking", "photography", "first aid", "pottery", "creative writing",
           "web development", "salsa dancing", "beekeeping"]
PLANTS = ["tomatoes", "basil", "strawberries", "chili peppers", "sunflowers", "lavender",
          "zucchini", "mint", "roses", "pumpkins"]
CAUSES = [("animal shelter", "walking dogs"), ("food bank", "sorting donations"),
          ("beach cleanup", "collecting plastic"), ("literacy program", "tutoring kids"),
          ("community garden", "building raised beds"), ("hospice", "reading to patients"),
          ("refugee center", "teaching English")]
CONCERTS = ["a jazz quartet", "an indie folk band", "the symphony orchestra", "a blues guitarist",
            "a K-pop group", "a reggae band", "an old punk band", "a string trio"]
GIFTS = ["a vintage camera", "a handmade scarf", "a telescope", "a record player",
         "concert tickets", "a leather journal", "a bonsai tree", "a drone", "hiking boots",
         "a espresso machine"]
CARS = ["a used hatchback", "an electric car", "a camper van", "a cargo bike", "a motorcycle",
        "a pickup truck"]
HIKES = ["Mount Rainier", "the Dolomites", "the Pyrenees", "Table Mountain", "the Cairngorms",
         "Mount Fuji", "the Rockies", "the Tatra mountains", "Snowdon", "Kilimanjaro"]
RELATIVES = [("sister", "a baby girl", "Ada"), ("brother", "a baby boy", "Leo"),
             ("cousin", "twins", "Mila and Noah"), ("best friend", "a baby boy", "Theo"),
             ("sister", "a baby boy", "Elias"), ("brother", "a baby girl", "Zoe")]
INJURIES = [("sprained my ankle", "ankle", "playing football"),
            ("broke my wrist", "wrist", "falling off my bike"),
            ("pulled a muscle in my back", "back", "moving a sofa"),
            ("hurt my knee", "knee", "skiing"), ("cracked a rib", "rib", "slipping on ice")]
MOVIES = [("a documentary about octopuses", "the ocean"), ("a Korean thriller", "a missing painter"),
          ("an animated film", "a robot who learns to garden"),
          ("a French comedy", "two rival bakers"), ("a war drama", "a field hospital"),
          ("a space movie", "a mining colony on Europa")]
ALLERGIES = ["peanuts", "shellfish", "cats", "pollen", "penicillin", "sesame"]

FILLERS_OPEN = [
    "Hey {o}! How have you been?", "Hi {o}, long time no talk!", "Good morning {o}!",
    "Hey! It's been a busy couple of weeks.", "{o}! So good to hear from you.",
    "Hi there, how was your week?", "Hey {o}, I was just thinking about you.",
]
FILLERS_REPLY = [
    "I've been good, thanks! Work has been a lot, but I'm hanging in there.",
    "Pretty busy, honestly. But good busy.", "Not bad at all! What's new with you?",
    "Oh, same old, same old. Tell me your news first!", "Doing well! The weather has been lovely.",
    "Tired but happy. How about you?",
]
FILLERS_REACT = [
    "That's amazing, I'm so happy for you!", "Wow, that sounds like a lot of fun.",
    "Oh no, that sounds stressful.", "Ha, that's so you.", "I love that!",
    "That's really impressive, honestly.", "You always find the best things to do.",
    "I'd love to hear more about that sometime.", "That must have felt great.",
    "No way! Tell me everything.", "Good for you, seriously.",
    "I remember you talking about wanting to do that.",
]
FILLERS_CLOSE = [
    "Anyway, I should get going. Talk soon!", "Let's catch up again next week.",
    "Take care, {o}!", "Okay, dinner is ready here. Bye for now!",
    "Great talking to you, as always.", "Let me know how it goes!",
]
FILLERS_SMALL = [
    "The weather has been so strange lately, sunny one minute and raining the next.",
    "I've been trying to sleep earlier, with mixed results.",
    "Work is fine, just a lot of meetings this month.",
    "I finally cleaned out my closet, it took the whole Sunday.",
    "My neighbours have been renovating, so it's been noisy.",
    "I've been drinking way too much coffee this week.",
    "We had a long family dinner on Sunday, it was nice.",
    "I keep meaning to call my parents more often.",
]


class Event:
    """One fact a speaker shares: its turns, and the questions it answers."""

    def __init__(self, kind, turns, questions):
        self.kind = kind
        self.turns = turns          # [(speaker, text, role)] role: 'fact', 'ask', 'detail', 'react'
        self.questions = questions  # [(kind, question, evidence roles)]


def pick(pool, used):
    options = [x for x in pool if x not in used] or list(pool)
    choice = RNG.choice(options)
    used.add(choice)
    return choice


def event_makers():
    def trip(p, o, used, date):
        city = pick(CITIES, used)
        days = RNG.choice(["four", "five", "six", "ten"])
        sight = RNG.choice(["the old town", "a food market", "a museum of modern art",
                            "the botanical garden", "a cable car up the hill"])
        best = RNG.choice(["the street food", "a tiny jazz bar", "a boat trip at sunset",
                           "a bakery near our hotel", "a bookshop with a cat"])
        turns = [(p, f"I just got back from {days} days in {city}! We walked around {sight} "
                     f"almost every day.", "fact"),
                 (o, f"Jealous! What was the best part of {city}?", "ask"),
                 (p, f"Honestly, {best}. I'd go back just for that.", "detail")]
        n, pr = p
        qs = [("when", f"When did {n} travel to {city}?", ["fact"]),
              ("speaker", f"Which city did {n} visit for {days} days?", ["fact"]),
              ("two-turn", f"What did {n} like most about the trip to {city}?", ["ask", "detail"]),
              ("paraphrase", f"Where did {n} go on vacation abroad?", ["fact"])]
        return Event("trip", turns, qs)

    def pet(p, o, used, date):
        baby, kind, breeds = RNG.choice(PETS)
        name = pick(PET_NAMES, used)
        breed = RNG.choice(breeds)
        turns = [(p, f"Big news: we adopted a {baby} from the shelter! We're calling it {name}.", "fact"),
                 (o, f"Aww, {name} is such a cute name. What kind of {kind} is it?", "ask"),
                 (p, f"A {breed}. Already chewing on everything, of course.", "detail")]
        n, pr = p
        qs = [("speaker", f"What is the name of {n}'s new {kind}?", ["fact"]),
              ("when", f"When did {n} adopt {name}?", ["fact"]),
              ("two-turn", f"What breed is {n}'s pet {name}?", ["ask", "detail"]),
              ("morph", f"Did {n} adopt any animals from a shelter?", ["fact"]),
              ("paraphrase", f"Which animal joined {n}'s household?", ["fact"])]
        return Event("pet", turns, qs)

    def instrument(p, o, used, date):
        inst = pick(INSTRUMENTS, used)
        teacher = RNG.choice(["a retired jazz musician", "a conservatory student",
                              "an online course", "my uncle", "a neighbour"])
        song = RNG.choice(["a simple Beatles tune", "a waltz", "the theme from an old movie",
                           "a lullaby", "a folk song"])
        turns = [(p, f"I started taking {inst} lessons! My teacher is {teacher}.", "fact"),
                 (o, "Oh fun! Can you play anything yet?", "ask"),
                 (p, f"Just {song}, slowly. My neighbours are very patient.", "detail")]
        n, pr = p
        qs = [("speaker", f"What instrument is {n} learning?", ["fact"]),
              ("when", f"When did {n} begin learning the {inst}?", ["fact"]),
              ("morph", f"Who teaches {n} to play the {inst}?", ["fact"]),
              ("two-turn", f"What song can {n} play so far?", ["ask", "detail"]),
              ("paraphrase", f"What musical hobby did {n} take up?", ["fact"])]
        return Event("instrument", turns, qs)

    def race(p, o, used, date):
        race_, verb = pick(SPORTS, used)
        place = RNG.choice(["a personal best", "the top twenty", "third place in my age group",
                            "the finish line just before the cutoff", "a medal"])
        turns = [(p, f"I {verb} my first {race_} on Saturday and got {place}!", "fact"),
                 (o, "Congratulations!! How are your legs?", "react"),
                 (p, "Sore, but worth it. I already signed up for another one.", "react")]
        n, pr = p
        qs = [("speaker", f"What competition did {n} take part in?", ["fact"]),
              ("when", f"When did {n} do the {race_}?", ["fact"]),
              ("morph", f"How did {n} place in the {race_}?", ["fact"]),
              ("paraphrase", f"What athletic event did {n} compete in as a newcomer?", ["fact"])]
        return Event("race", turns, qs)

    def cooking(p, o, used, date):
        dish = pick(DISHES, used)
        who = RNG.choice(["my in-laws", "my book club", "our new neighbours",
                          "my coworkers", "my grandparents"])
        turns = [(p, f"I cooked {dish} for {who} last night and nothing burned!", "fact"),
                 (o, "Ha! Did they like it?", "ask"),
                 (p, "They asked for seconds, so I'm calling it a win.", "detail")]
        n, pr = p
        qs = [("speaker", f"What dish did {n} make for {who}?", ["fact"]),
              ("when", f"When did {n} cook {dish}?", ["fact"]),
              ("morph", f"Who did {n} cook dinner for?", ["fact"]),
              ("paraphrase", f"What meal did {n} prepare for guests?", ["fact"])]
        return Event("cooking", turns, qs)

    def job(p, o, used, date):
        role = pick(JOBS, used)
        company = RNG.choice(COMPANIES)
        turns = [(p, f"I accepted an offer! I'll be working as a {role} at {company}.", "fact"),
                 (o, "That's huge! When do you start?", "ask"),
                 (p, f"In {RNG.choice(['two weeks', 'a month', 'three weeks'])}. "
                     f"I'm nervous and excited.", "detail")]
        n, pr = p
        qs = [("speaker", f"What new job did {n} get?", ["fact"]),
              ("when", f"When did {n} accept the {role} position?", ["fact"]),
              ("speaker", f"Where will {n} be working as a {role}?", ["fact"]),
              ("two-turn", f"How soon does {n} start the new job?", ["ask", "detail"]),
              ("paraphrase", f"What is {n}'s new occupation?", ["fact"])]
        return Event("job", turns, qs)

    def art(p, o, used, date):
        medium, verb, subject = pick(ART, used)
        turns = [(p, f"I {verb} {subject} this week, {medium}. Probably my favourite piece so far.", "fact"),
                 (o, "You have to send me a picture!", "react")]
        n, pr = p
        noun = {"painted": "painting", "drew": "drawing", "made": "pottery",
                "carved": "print"}[verb]
        qs = [("morph", f"What was the subject of {n}'s {medium} {noun}?", ["fact"]),
              ("when", f"When did {n} make the piece of {subject}?", ["fact"]),
              ("paraphrase", f"What artwork did {n} create recently?", ["fact"])]
        return Event("art", turns, qs)

    def book(p, o, used, date):
        what, title = pick(BOOKS, used)
        turns = [(p, f"I couldn't put down {what} this week, it's called {title}.", "fact"),
                 (o, f"Ooh, should I read {title} too?", "ask"),
                 (p, f"Yes, if you like {RNG.choice(['slow endings', 'twists', 'long chapters', 'short chapters'])}. "
                     f"I'll lend you my copy.", "detail")]
        n, pr = p
        qs = [("speaker", f"What book was {n} reading?", ["fact"]),
              ("when", f"When did {n} read {title}?", ["fact"]),
              ("morph", f"Which book did {n} recommend lending?", ["detail"]),
              ("paraphrase", f"Which volume has {n} been engrossed in lately?", ["fact"])]
        return Event("book", turns, qs)

    def course(p, o, used, date):
        subject = pick(COURSES, used)
        where = RNG.choice(["the community college", "an evening class downtown",
                            "an app on my phone", "a weekend workshop"])
        turns = [(p, f"I signed up for a {subject} class at {where}.", "fact"),
                 (o, f"Why {subject}?", "ask"),
                 (p, f"I've always wanted to, and {RNG.choice(['a friend dared me', 'my partner is doing it too', 'it helps at work', 'I needed a new challenge'])}.",
                  "detail")]
        n, pr = p
        qs = [("speaker", f"What class did {n} sign up for?", ["fact"]),
              ("when", f"When did {n} enroll in the {subject} course?", ["fact"]),
              ("two-turn", f"Why did {n} decide to study {subject}?", ["ask", "detail"]),
              ("paraphrase", f"What is {n} studying in the evenings?", ["fact"])]
        return Event("course", turns, qs)

    def garden(p, o, used, date):
        plant = pick(PLANTS, used)
        turns = [(p, f"My {plant} are finally growing on the balcony, I planted them in spring.", "fact"),
                 (o, "Any tips? Mine always die.", "ask"),
                 (p, "Lots of sun, and don't drown them. That's the whole secret.", "detail")]
        n, pr = p
        qs = [("morph", f"What is {n} growing on the balcony?", ["fact"]),
              ("two-turn", f"What gardening tips did {n} give?", ["ask", "detail"]),
              ("paraphrase", f"Which plants does {n} look after at home?", ["fact"])]
        return Event("garden", turns, qs)

    def volunteer(p, o, used, date):
        place, task = pick(CAUSES, used)
        turns = [(p, f"I've started volunteering at the {place} on Sundays, mostly {task}.", "fact"),
                 (o, "That's really kind of you.", "react")]
        n, pr = p
        qs = [("speaker", f"Where does {n} volunteer?", ["fact"]),
              ("when", f"When did {n} start volunteering at the {place}?", ["fact"]),
              ("morph", f"What does {n} do as a volunteer?", ["fact"]),
              ("paraphrase", f"What unpaid charity work does {n} do on weekends?", ["fact"])]
        return Event("volunteer", turns, qs)

    def concert(p, o, used, date):
        band = pick(CONCERTS, used)
        venue = RNG.choice(["an old church", "a tiny basement club", "the park amphitheatre",
                            "the stadium", "a rooftop bar"])
        turns = [(p, f"Went to see {band} at {venue} on Friday. Best night out in ages.", "fact"),
                 (o, "Who did you go with?", "ask"),
                 (p, f"My {RNG.choice(['sister', 'roommate', 'partner', 'old college friend'])}. We danced all night.",
                  "detail")]
        n, pr = p
        qs = [("morph", f"What concert did {n} go to?", ["fact"]),
              ("when", f"When did {n} see {band} live?", ["fact"]),
              ("two-turn", f"Who went with {n} to the {band.split()[-1]} show?", ["ask", "detail"]),
              ("paraphrase", f"What live music performance did {n} attend?", ["fact"])]
        return Event("concert", turns, qs)

    def gift(p, o, used, date):
        thing = pick(GIFTS, used)
        who = RNG.choice(["my dad", "my partner", "my best friend", "my mom", "my grandfather"])
        occasion = RNG.choice(["birthday", "anniversary", "retirement", "graduation"])
        turns = [(p, f"For {who}'s {occasion} I got {thing}. I think they loved it.", "fact")]
        n, pr = p
        qs = [("speaker", f"What present did {n} give for the {occasion}?", ["fact"]),
              ("morph", f"Who received {thing} from {n}?", ["fact"]),
              ("when", f"When did {n} buy {thing} as a gift?", ["fact"])]
        return Event("gift", turns, qs)

    def vehicle(p, o, used, date):
        car = pick(CARS, used)
        turns = [(p, f"We finally bought {car}. No more waiting for the bus in the rain!", "fact"),
                 (o, "Nice! New or used?", "ask"),
                 (p, f"{RNG.choice(['Used, but it runs perfectly', 'Brand new, we saved for two years', 'Second hand from a colleague'])}.",
                  "detail")]
        n, pr = p
        qs = [("speaker", f"What vehicle did {n} buy?", ["fact"]),
              ("when", f"When did {n} get {car}?", ["fact"]),
              ("paraphrase", f"How does {n} get around town now?", ["fact"])]
        return Event("vehicle", turns, qs)

    def hike(p, o, used, date):
        peak = pick(HIKES, used)
        turns = [(p, f"We hiked in {peak} last weekend. My legs still hate me.", "fact"),
                 (o, "Was the view worth it?", "ask"),
                 (p, f"Totally. We saw {RNG.choice(['a family of goats', 'the clouds below us', 'a glacier', 'an eagle'])} near the top.",
                  "detail")]
        n, pr = p
        qs = [("morph", f"Where did {n} go hiking?", ["fact"]),
              ("when", f"When did {n} hike in {peak}?", ["fact"]),
              ("two-turn", f"What did {n} see near the top of {peak}?", ["ask", "detail"]),
              ("paraphrase", f"Which range or peak did {n} trek through?", ["fact"])]
        return Event("hike", turns, qs)

    def baby(p, o, used, date):
        rel, kind, name = pick(RELATIVES, used)
        title = "aunt" if p[1] == "she" else "uncle"
        turns = [(p, f"My {rel} had {kind}! {name}, born on Tuesday. I'm officially an {title}.", "fact"),
                 (o, "Congratulations to the whole family!", "react")]
        n, pr = p
        qs = [("speaker", f"What is the name of the baby in {n}'s family?", ["fact"]),
              ("when", f"When was {n}'s {rel}'s baby born?", ["fact"]),
              ("paraphrase", f"Who became a parent in {n}'s family?", ["fact"])]
        return Event("baby", turns, qs)

    def injury(p, o, used, date):
        what, part, how = pick(INJURIES, used)
        turns = [(p, f"Ugh, I {what} {how}. The doctor says six weeks of rest.", "fact"),
                 (o, "Oh no! Do you need anything?", "react")]
        n, pr = p
        qs = [("morph", f"How did {n} get injured?", ["fact"]),
              ("when", f"When did {n} hurt {POSS[pr]} {part}?", ["fact"]),
              ("paraphrase", f"What mishap put {n} out of action for a while?", ["fact"])]
        return Event("injury", turns, qs)

    def movie(p, o, used, date):
        film, about = pick(MOVIES, used)
        turns = [(p, f"We watched {film} last night, it's about {about}. I cried twice.", "fact")]
        n, pr = p
        qs = [("speaker", f"What movie did {n} watch?", ["fact"]),
              ("morph", f"What was the film {n} saw about?", ["fact"]),
              ("when", f"When did {n} watch {film}?", ["fact"])]
        return Event("movie", turns, qs)

    def allergy(p, o, used, date):
        what = pick(ALLERGIES, used)
        turns = [(o, "Do you want to come over for dinner next week?", "ask"),
                 (p, f"I'd love to! Just a heads-up, I'm allergic to {what}.", "detail")]
        n, pr = p
        qs = [("speaker", f"What is {n} allergic to?", ["detail"]),
              ("paraphrase", f"What must {n} avoid for health reasons?", ["detail"]),
              ("two-turn", f"What did {n} warn about when invited to dinner?", ["ask", "detail"])]
        return Event("allergy", turns, qs)

    def move(p, o, used, date):
        area = RNG.choice(["a flat near the river", "a house with a garden", "a tiny studio downtown",
                           "an apartment above a bakery", "a cottage outside the city"])
        turns = [(p, f"We moved! We're in {area} now. Boxes everywhere.", "fact"),
                 (o, "Is it bigger than the old place?", "ask"),
                 (p, f"{RNG.choice(['A bit smaller, but much brighter', 'Twice as big', 'About the same, but quieter'])}.",
                  "detail")]
        n, pr = p
        qs = [("speaker", f"Where does {n} live now?", ["fact"]),
              ("when", f"When did {n} move to {area}?", ["fact"]),
              ("two-turn", f"How does {n}'s new home compare with the old one?", ["ask", "detail"]),
              ("paraphrase", f"What new place did {n} relocate to?", ["fact"])]
        return Event("move", turns, qs)

    return [trip, pet, instrument, race, cooking, job, art, book, course, garden, volunteer,
            concert, gift, vehicle, hike, baby, injury, movie, allergy, move]


def date_format(at):
    return at.strftime("%Y-%m-%dT%H:%M:%S")


def conversation(index, makers):
    """One conversation: two (every fourth: three) people, 22 to 29 sessions over a year or more."""
    count = 3 if index % 4 == 3 else 2
    people = RNG.sample(PEOPLE, count)
    key = f"dialogue:{index:02d}"
    start = datetime(2025, 1, 6, 19, 0) + timedelta(days=RNG.randrange(0, 200))
    used = {p[0]: set() for p in people}
    turns = []          # (speaker name, text, datetime)
    queries = []
    at = start
    for _ in range(RNG.randrange(22, 30)):
        at = at + timedelta(days=RNG.randrange(6, 25), minutes=RNG.randrange(-90, 90))
        order = people[:]
        RNG.shuffle(order)
        a, b = order[0], order[1]
        turns.append((a[0], RNG.choice(FILLERS_OPEN).format(o=b[0]), at))
        turns.append((b[0], RNG.choice(FILLERS_REPLY), at))
        for _ in range(RNG.randrange(2, 4)):
            teller = RNG.choice(people)
            other = RNG.choice([p for p in people if p != teller])
            event = RNG.choice(makers)(teller, other, used[teller[0]], at)
            roles = {}
            for speaker, text, role in event.turns:
                roles.setdefault(role, []).append(len(turns))
                turns.append((speaker[0], text, at))
            if RNG.random() < 0.6:
                turns.append((other[0], RNG.choice(FILLERS_REACT), at))
            if RNG.random() < 0.3:
                turns.append((RNG.choice(people)[0], RNG.choice(FILLERS_SMALL), at))
            for kind, question, evidence in RNG.sample(event.questions, min(2, len(event.questions))):
                relevant = sorted({seq for role in evidence for seq in roles.get(role, [])})
                queries.append({"kind": kind, "query": question,
                                "relevant": [f"session:{key}#{seq}" for seq in relevant],
                                "event": event.kind, "date": at.strftime("%Y-%m-%d")})
        turns.append((b[0], RNG.choice(FILLERS_CLOSE).format(o=a[0]), at))
    return key, people, turns, queries


STOP = set("a an the of to in on at for and or is was did does do what when where who which how "
           "with from by as it its his her their new any".split())


def words(text):
    return set(re.findall(r"[a-z0-9]+", text.lower())) - STOP


def check(turns, query):
    """Labels point at turns that exist; a paraphrase shares no content word with its
    evidence beyond the speaker's name."""
    for source in query["relevant"]:
        seq = int(source.rsplit("#", 1)[1])
        assert 0 <= seq < len(turns), source
    if query["kind"] == "paraphrase":
        name = query["query"].split()[0]
        ask = words(query["query"]) - words(name) - {"s"}
        for source in query["relevant"]:
            seq = int(source.rsplit("#", 1)[1])
            shared = ask & words(turns[seq][1])
            assert not shared, (query["query"], turns[seq][1], shared)


def main():
    makers = event_makers()
    sessions = os.path.join(HERE, "sessions")
    os.makedirs(sessions, exist_ok=True)
    for old in os.listdir(sessions):
        os.remove(os.path.join(sessions, old))
    all_queries = []
    conversations = 16
    for index in range(conversations):
        key, people, turns, queries = conversation(index, makers)
        lines = [{"_type": "metadata", "key": key, "created_at": date_format(turns[0][2]),
                  "updated_at": date_format(turns[-1][2]),
                  "metadata": {"speakers": [p[0] for p in people]}, "last_consolidated": 0}]
        for seq, (speaker, text, at) in enumerate(turns):
            role = "user" if speaker == people[0][0] else "assistant"
            lines.append({"role": role, "content": f"{speaker}: {text}",
                          "timestamp": date_format(at)})
        with open(os.path.join(sessions, f"{index:02d}.jsonl"), "w") as out:
            for line in lines:
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
        split = "tune" if index < conversations // 3 else "report"
        for number, query in enumerate(queries):
            check(turns, query)
            query["id"] = f"{key.split(':')[1]}-{number:03d}"
            query["split"] = split
            all_queries.append(query)
    ordered = [{k: q[k] for k in ("id", "kind", "split", "query", "relevant", "date")}
               for q in all_queries]
    with open(os.path.join(HERE, "queries.json"), "w") as out:
        json.dump(ordered, out, indent=1, ensure_ascii=False)
        out.write("\n")
    kinds = {}
    for q in ordered:
        kinds[q["kind"]] = kinds.get(q["kind"], 0) + 1
    print(f"{len(ordered)} questions over {conversations} conversations: {kinds}")


if __name__ == "__main__":
    main()
