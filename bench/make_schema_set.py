#!/usr/bin/python3
# Builds the structured-output benchmark set bench/data/schemas_bench.jsonl:
# realistic JSON Schemas (Draft 2020-12) with a valid, realistic instance
# each, for timing / testing JSON Schema constrained decoding.
#
#   /usr/bin/python3 bench/make_schema_set.py [--out FILE] [--check]
#
# One JSON object a line: {"id", "name", "schema", "instance"}. Deterministic
# (fixed seed, no clock); rerunning rewrites the same bytes, --check only
# compares with the committed file. Every schema is checked against the
# metaschema and the keyword list below, every instance with the strict
# validator of tests/grammar/jsoncheck.py, and every instance's estimated
# token count (a BPE-like count of json.dumps(instance)) lies in 50..600.
#
# Content (256 schemas): 180 API-style payloads from 18 families x 10
# (users, orders, products, analytics and calendar events, invoices, app
# configs, log records, payments, articles, tickets, weather, jobs, recipes,
# trips, surveys, chat messages, bank statements; random field subsets,
# $defs for shared addresses / parties, allOf base + specific parts, API
# envelopes), 6 GeoJSON-like, 10 k8s-like manifests, 20 OpenAPI-like tool
# parameter / tool call schemas, 20 large ones (54-99 properties, objects
# nested 5-7 deep) and 20 recursive ones ($defs/$ref trees, a linked list,
# a JSON-like value, an AST, comment threads, "#" root refs). Names are
# "<kind>_NN", e.g. "order_summary_01", "large_patient_record_02".
#
# Keywords: the set tests/grammar/gen_schemas.py covers (type, properties,
# required, additionalProperties, enum, const, anyOf, oneOf (pairwise
# different types), allOf (object branches, disjoint properties), $defs,
# $ref, items, prefixItems, minItems, maxItems, minLength, maxLength,
# pattern, format (date, date-time, time, uuid, email), minimum, maximum,
# exclusiveMinimum, exclusiveMaximum) plus annotations title, description,
# examples, default, $schema, $id, $comment.
#
# Standard library + jsonschema only; run with Debian's /usr/bin/python3.

import argparse
import collections
import json
import math
import os
import random
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "grammar"))

import jsoncheck  # noqa: E402
import schema_instances  # noqa: E402
from schema_instances import Hooks, InstanceGenerator  # noqa: E402

SEED = "tessera-schema-bench-v1"
OUT_DEFAULT = os.path.join(ROOT, "bench", "data", "schemas_bench.jsonl")
DRAFT = "https://json-schema.org/draft/2020-12/schema"
MIN_TOKENS, MAX_TOKENS = 50, 600
ALLOWED = {
    "type", "properties", "required", "additionalProperties", "enum", "const",
    "anyOf", "oneOf", "allOf", "$defs", "$ref", "items", "prefixItems",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "title", "description", "examples", "default", "$schema", "$id", "$comment",
}

# ====================================================================== words

FIRST = ("Emma Liam Olivia Noah Ava Ethan Sophia Mason Isabella Lucas Mia "
         "Oliver Amelia James Harper Benjamin Evelyn Henry Abigail Alexander "
         "Emily Daniel Charlotte Michael Grace Samuel Chloe David Zoe Joseph "
         "Nora Priya Mateo Aisha Kenji Ingrid").split()
LAST = ("Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez "
        "Martinez Hernandez Lopez Wilson Anderson Thomas Taylor Moore Jackson "
        "Martin Lee Thompson White Harris Clark Lewis Walker Young King "
        "Wright Scott Patel Nakamura Okafor Larsen").split()
CITIES = [("Portland", "Oregon", "US"), ("Austin", "Texas", "US"),
          ("Denver", "Colorado", "US"), ("Boston", "Massachusetts", "US"),
          ("Seattle", "Washington", "US"), ("Chicago", "Illinois", "US"),
          ("Toronto", "Ontario", "CA"), ("Vancouver", "British Columbia", "CA"),
          ("Manchester", "England", "GB"), ("Edinburgh", "Scotland", "GB"),
          ("Berlin", "Berlin", "DE"), ("Munich", "Bavaria", "DE"),
          ("Lyon", "Rhone", "FR"), ("Amsterdam", "North Holland", "NL"),
          ("Sydney", "New South Wales", "AU"), ("Melbourne", "Victoria", "AU"),
          ("Osaka", "Osaka", "JP"), ("Dublin", "Leinster", "IE")]
COUNTRIES = {"US": "United States", "CA": "Canada", "GB": "United Kingdom",
             "DE": "Germany", "FR": "France", "NL": "Netherlands",
             "AU": "Australia", "JP": "Japan", "IE": "Ireland"}
STREETS = ("Maple Oak Pine Cedar Elm Washington Lake Hill Park River Sunset "
           "Highland Church Market Mill Willow Spring Harbor").split()
STREET_TYPES = ["Street", "Avenue", "Road", "Lane", "Drive", "Boulevard", "Court", "Way"]
COMPANIES = ["Acme Logistics", "Blue Harbor Foods", "Northwind Traders",
             "Summit Analytics", "Greenleaf Energy", "Brightpath Learning",
             "Silverline Health", "Redwood Software", "Cobalt Robotics",
             "Pinecrest Insurance", "Lighthouse Media", "Evergreen Outdoor Supply"]
PRODUCT_ADJ = ("Ergonomic Wireless Stainless Organic Compact Portable Waterproof "
               "Handcrafted Lightweight Premium Adjustable Rechargeable Vintage "
               "Insulated").split()
PRODUCT_MAT = "Bamboo Leather Cotton Steel Ceramic Walnut Aluminum Wool Glass Linen".split()
PRODUCT_NOUN = ["Desk Lamp", "Backpack", "Water Bottle", "Headphones",
                "Coffee Grinder", "Chef Knife", "Yoga Mat", "Notebook",
                "Office Chair", "Throw Blanket", "Bluetooth Speaker",
                "Cutting Board", "Rain Jacket", "Travel Mug", "Keyboard"]
BRANDS = ["Northpeak", "Lumina", "Oakline", "Vantage", "Kestrel", "Harbor & Co", "Solstice", "Brightwell"]
DEPARTMENTS = ["Engineering", "Marketing", "Sales", "Finance", "Customer Support",
               "Human Resources", "Operations", "Legal", "Product", "Design"]
JOB_TITLES = ["Senior Software Engineer", "Product Manager", "Data Analyst",
              "Marketing Coordinator", "Account Executive", "UX Designer",
              "Customer Success Manager", "DevOps Engineer", "Financial Analyst",
              "Operations Lead", "Technical Writer", "Registered Nurse"]
SKILLS = ["Python", "SQL", "project management", "public speaking", "Kubernetes",
          "data visualization", "negotiation", "React", "technical writing",
          "customer research", "budget planning", "Go"]
TAGS = ["featured", "sale", "new", "eco-friendly", "bestseller", "limited",
        "gift", "outdoor", "kitchen", "office", "travel", "summer", "urgent",
        "billing", "onboarding", "mobile", "security", "performance"]
SERVICES = ["payment-service", "auth-api", "inventory-worker", "search-indexer",
            "notification-gateway", "checkout-web", "report-scheduler", "user-profile-api"]
HOSTS = ["web-01.prod.example.com", "api-3.eu-west.example.com", "worker-12.internal",
         "db-primary.example.net", "cache-2.us-east.example.com"]
TIMEZONES = ["America/New_York", "America/Los_Angeles", "Europe/London",
             "Europe/Berlin", "Asia/Tokyo", "Australia/Sydney", "America/Chicago", "UTC"]
LOCALES = ["en-US", "en-GB", "de-DE", "fr-FR", "ja-JP", "es-ES", "nl-NL", "pt-BR"]
LANGS = ["en", "de", "fr", "es", "ja", "it", "nl", "pt", "sv", "ko"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CAD", "AUD", "CHF", "SEK"]
AIRPORTS = ["JFK", "LAX", "SFO", "ORD", "LHR", "CDG", "FRA", "AMS", "NRT", "SYD", "SEA", "BOS", "DEN", "YYZ"]
AIRLINES = ["UA", "DL", "AA", "BA", "LH", "AF", "KL", "QF", "AC", "JL"]
TICKERS = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "TSLA", "IBM", "ORCL", "SAP", "ADBE"]
INGREDIENTS = ["flour", "sugar", "butter", "eggs", "whole milk", "olive oil",
               "garlic", "yellow onion", "cherry tomatoes", "fresh basil",
               "parmesan cheese", "chicken breast", "brown rice", "black beans",
               "lemon juice", "sea salt", "black pepper", "baking powder"]
CUISINES = ["Italian", "Mexican", "Japanese", "Indian", "French", "Thai", "Greek", "American"]
COLORS = ["navy blue", "forest green", "charcoal", "sand", "burgundy", "white", "black", "sky blue"]
KEY_WORDS = {
    "labels": ["app", "team", "tier", "environment", "version", "owner", "component"],
    "annotations": ["deployment.kubernetes.io/revision", "owner-email", "description", "last-applied"],
    "headers": ["Content-Type", "Accept", "X-Request-Id", "User-Agent", "Cache-Control"],
    "env": ["DATABASE_URL", "LOG_LEVEL", "PORT", "REDIS_HOST", "FEATURE_FLAGS"],
    "features": ["dark_mode", "beta_checkout", "new_dashboard", "two_factor", "smart_search"],
    "reactions": ["thumbs_up", "heart", "laugh", "tada", "eyes"],
    "metadata": ["source", "campaign", "referrer", "region", "plan", "segment"],
}

SENTENCES = [
    "Our team reviewed the request and scheduled the work for next week.",
    "This item ships within two business days from our Portland warehouse.",
    "Customers love the soft finish and the sturdy construction.",
    "Please bring a valid photo ID and arrive fifteen minutes early.",
    "The quarterly report covers revenue, churn and support volume.",
    "Water the plants every morning and keep them out of direct sunlight.",
    "The update improves battery life and fixes several sync issues.",
    "Contact the front desk if you need a late checkout.",
    "Invoices are due thirty days after the issue date.",
    "The trail is steep in places but the views from the top are worth it.",
    "We noticed unusual activity and temporarily locked the account.",
    "Remember to rotate the access keys before the end of the month.",
    "The meeting will focus on hiring plans and the product roadmap.",
    "All orders over fifty dollars qualify for free standard shipping.",
    "The new office opens on the third floor of the Harbor building.",
    "Keep refrigerated and consume within five days of opening.",
]
BIOS = ["Coffee lover, weekend hiker and full-time data nerd.",
        "Product designer who enjoys clean interfaces and long bike rides.",
        "Backend engineer, occasional baker, proud owner of two cats.",
        "Marketing lead based in Austin. Opinions are my own.",
        "Nurse, runner and amateur photographer."]
REVIEWS = ["Exactly as described and arrived a day early.",
           "Good quality for the price, although the strap feels a little thin.",
           "I use it every day and it still looks brand new.",
           "The color was slightly different from the photos.",
           "Would buy again, the customer service was excellent."]
LOG_MESSAGES = ["request completed", "connection pool exhausted, retrying",
                "user session expired", "payment authorized",
                "cache miss for product catalog", "slow query detected",
                "failed to reach upstream service", "configuration reloaded",
                "scheduled job finished", "invalid token signature"]
TICKET_TEXT = ["I was charged twice for my last order and need a refund.",
               "The mobile app crashes when I open the settings page.",
               "I cannot reset my password because the email never arrives.",
               "Our team needs three more seats added to the business plan.",
               "The export to CSV is missing the date column."]
MESSAGES = ["Sounds good, see you at three.", "Can you send me the latest draft?",
            "The deploy finished without errors.", "I left the keys at the front desk.",
            "Thanks for the quick reply!", "Let's move the call to Thursday morning."]
STEPS = ["Preheat the oven to 200 degrees.", "Whisk the eggs and sugar until pale.",
         "Fold in the flour gently.", "Simmer the sauce for ten minutes.",
         "Season with salt and pepper to taste.", "Bake for twenty five minutes until golden.",
         "Let it rest for five minutes before serving."]
TITLES = ["Quarterly Planning Review", "Spring Product Launch", "Weekly Team Sync",
          "Customer Onboarding Workshop", "How We Cut Our Cloud Bill in Half",
          "A Beginner's Guide to Sourdough", "Ten Tips for Remote Teams",
          "Annual Security Audit", "Design System Kickoff", "Holiday Sale Preview"]
EVENT_NAMES = ["page_view", "button_click", "signup", "purchase", "add_to_cart",
               "search", "video_play", "logout"]


def person(rng):
    return rng.choice(FIRST), rng.choice(LAST)


def email_of(rng, first=None, last=None):
    if first is None:
        first, last = person(rng)
    domain = rng.choice(["example.com", "mail.example.org", "example.net"] +
                        [c.split()[0].lower() + ".com" for c in COMPANIES[:4]])
    return f"{first.lower()}.{last.lower()}@{domain}"


def product_name(rng):
    return f"{rng.choice(PRODUCT_ADJ)} {rng.choice(PRODUCT_MAT)} {rng.choice(PRODUCT_NOUN)}"


def sentences(rng, pool, lo=1, hi=2):
    return " ".join(rng.sample(pool, rng.randint(lo, min(hi, len(pool)))))


def slug(rng):
    return re.sub(r"[^a-z0-9]+", "-", rng.choice(TITLES).lower()).strip("-")


def hexs(rng, n):
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def date_s(rng, y0=2021, y1=2025):
    return "%04d-%02d-%02d" % (rng.randint(y0, y1), rng.randint(1, 12), rng.randint(1, 28))


def time_s(rng):
    t = "%02d:%02d:00" % (rng.randint(6, 21), rng.choice([0, 15, 30, 45]))
    return t + (rng.choice(["Z", "Z", "+01:00", "-05:00", "+09:00"]))


def datetime_s(rng):
    return "%sT%02d:%02d:%02d%s" % (date_s(rng, 2023, 2025), rng.randint(0, 23), rng.randint(0, 59),
                                    rng.randint(0, 59), rng.choice(["Z", "Z", "Z", "+02:00", "-07:00"]))


def uuid_s(rng):
    return "%s-%s-4%s-%s%s-%s" % (hexs(rng, 8), hexs(rng, 4), hexs(rng, 3),
                                  rng.choice("89ab"), hexs(rng, 3), hexs(rng, 12))


# Patterns bench schemas use, with a realistic generator each (registered in
# schema_instances.PATTERNS so the instance generator knows them).
BENCH_PATTERNS = {
    "^ORD-\\d{6}$": lambda r: "ORD-%06d" % r.randint(1000, 999999),
    "^INV-\\d{4}-\\d{4}$": lambda r: "INV-%d-%04d" % (r.randint(2021, 2025), r.randint(1, 9999)),
    "^TCK-\\d{5}$": lambda r: "TCK-%05d" % r.randint(100, 99999),
    "^\\d{5}(-\\d{4})?$": lambda r: "%05d" % r.randint(10000, 99999) + r.choice(["", "-%04d" % r.randint(0, 9999)]),
    "^\\+[1-9]\\d{6,14}$": lambda r: "+1%d" % r.randint(2000000000, 9899999999),
    "^[a-z0-9]+(-[a-z0-9]+)*$": slug,
    "^[a-z]{2}-[A-Z]{2}$": lambda r: r.choice(LOCALES),
    "^#[0-9a-fA-F]{6}$": lambda r: "#" + hexs(r, 6),
    "^\\d+\\.\\d+\\.\\d+$": lambda r: "%d.%d.%d" % (r.randint(0, 4), r.randint(0, 20), r.randint(0, 30)),
    "^[0-9a-f]{32}$": lambda r: hexs(r, 32),
    "^[0-9a-f]{16}$": lambda r: hexs(r, 16),
    "^[A-Z_][A-Z0-9_]*$": lambda r: r.choice(KEY_WORDS["env"]),
    "^\\d+m$": lambda r: "%dm" % r.choice([100, 250, 500, 1000, 2000]),
    "^\\d+(Mi|Gi)$": lambda r: r.choice(["128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"]),
    "^[A-Z0-9]{6}$": lambda r: "".join(r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6)),
    "^[A-Z]{2}\\d{1,4}$": lambda r: r.choice(AIRLINES) + str(r.randint(10, 2999)),
    "^\\d{1,2}[A-F]$": lambda r: "%d%s" % (r.randint(1, 42), r.choice("ABCDEF")),
    "^\\d{4}$": lambda r: "%04d" % r.randint(0, 9999),
    "^[A-Z]{1,5}$": lambda r: r.choice(TICKERS),
    "^[a-z0-9-]+/[a-z0-9-]+$": lambda r: r.choice(["acme", "northwind", "redwood-labs"]) + "/" + r.choice(SERVICES),
    "^/[a-z0-9/_-]*$": lambda r: "/" + r.choice(["api/v1/orders", "api/v2/users/me", "health", "checkout/confirm", "search"]),
    "^[A-Z]{2}\\d{2}[A-Z0-9]{12,30}$": lambda r: r.choice(["DE", "GB", "NL", "FR"]) + "%02d" % r.randint(10, 99) + "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(18)),
    "^[a-z]{2}$": lambda r: r.choice(LANGS),
    "^@[a-z0-9_]{2,15}$": lambda r: "@" + r.choice(FIRST).lower() + r.choice(["", "_dev", "42", "_codes"]),
    "^[A-Z]{3}-\\d{4}$": lambda r: r.choice(["TBL", "LMP", "CHR", "BKP", "MUG", "KNF"]) + "-%04d" % r.randint(1, 9999),
    "^[A-Z]{3}$": lambda r: r.choice(CURRENCIES),
    "^[A-Z]{2}$": lambda r: r.choice(list(COUNTRIES)),
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": lambda r: r.choice(SERVICES),
    "^[a-z][a-z0-9_]*$": lambda r: r.choice(["order_total", "user_id", "created_at", "status", "country_code", "plan_name"]),
}
schema_instances.PATTERNS.update({k: v for k, v in BENCH_PATTERNS.items() if k not in schema_instances.PATTERNS})


def norm(name):
    return re.sub(r"[^a-z0-9]", "", (name or "").lower())


# ====================================================================== hooks

class Realistic(Hooks):
    """Realistic values chosen by property name (the hint)."""

    def __init__(self, overrides=None):
        self.overrides = overrides or {}

    def string(self, hint, schema, rng):
        k = norm(hint)
        for _ in range(6):
            value = self.propose(k, schema, rng)
            if value is None or InstanceGenerator.string_ok(value, schema):
                return value
        return None

    def propose(self, k, s, rng):
        if k in self.overrides:
            return self.overrides[k](rng)
        fmt, pat = s.get("format"), s.get("pattern")
        if fmt == "email":
            return email_of(rng)
        if fmt == "date":
            return date_s(rng, 1950, 2005) if "birth" in k else date_s(rng)
        if fmt == "date-time":
            return datetime_s(rng)
        if fmt == "time":
            return time_s(rng)
        if fmt == "uuid":
            return uuid_s(rng)
        if pat == "^[A-Z]{3}$":
            if any(w in k for w in ("origin", "destination", "airport", "from", "to")):
                return rng.choice(AIRPORTS)
            return rng.choice(CURRENCIES)
        if pat in BENCH_PATTERNS:
            return BENCH_PATTERNS[pat](rng)
        if pat:
            return None
        return realistic_text(k, rng)

    def number(self, hint, lo, hi, integer, rng):
        k = norm(hint)
        v = realistic_number(k, rng)
        if v is None:
            return None
        if integer:
            return int(round(v))
        return v

    def key(self, hint, rng):
        k = norm(hint)
        for name, words in KEY_WORDS.items():
            if name in k or k in ("matchlabels", "selector") and name == "labels":
                return rng.choice(words)
        if "data" == k or "config" in k:
            return rng.choice(["app.properties", "log_level", "max_connections", "region", "feature_x"])
        if "field" in k or "attribute" in k or "custom" in k:
            return rng.choice(["account_tier", "referral_code", "preferred_contact", "region", "shoe_size"])
        if "score" in k or "count" in k or "totals" in k or "stock" in k:
            return rng.choice(["north", "south", "east", "west", "online"])
        return rng.choice(["source", "region", "note", "category", "owner", "department"])


# Realistic values for specific (normalized) property names.
VALUES_BY_KEY = {
    "adaptername": ["Type 2 to CCS adapter", "NACS to J1772 adapter"],
    "amuletname": ["Amulet of Dawn", "Pendant of the Tides"], "armorname": ["Dragonscale Armor", "Leather Jerkin"],
    "bootsname": ["Boots of Swiftness", "Worn Travel Boots"], "helmetname": ["Iron Helm", "Hood of Shadows"],
    "ringname": ["Ring of Embers", "Silver Band"], "weaponname": ["Silver Longsword", "Oak Staff", "Hunter's Bow"],
    "cursename": ["Curse of Frailty", "Mark of the Hollow"], "questname": ["The Lost Lighthouse", "Wolves at the Gate", "A Debt Repaid"],
    "sourcename": ["Shrine of Light", "Elixir of Might", "Blessing of the Forest"],
    "mapname": ["Frostvale", "Ember Plains", "Whispering Marsh"], "regionname": ["Northern Highlands", "Sunken Coast"],
    "timeofdayname": ["dawn", "noon", "dusk", "midnight"],
    "artifactname": ["build-output.tar.gz", "coverage-report.html", "app-release.apk"],
    "artifactpathtext": ["dist/", "build/reports/", "target/release/"],
    "buildcommandtext": ["npm run build", "make release", "go build ./..."],
    "testcommandtext": ["pytest -q", "npm test", "go test ./..."],
    "crontext": ["0 3 * * *", "*/30 * * * *", "0 9 * * 1"],
    "vaultpathtext": ["secret/data/ci/deploy", "kv/payments/prod"],
    "workingdirectoryname": ["services/api", "web", "."], "defaultbranchname": ["main", "develop", "trunk"],
    "bucketname": ["acme-build-artifacts", "northwind-release-bundles"],
    "pipelinename": ["api-release", "web-nightly", "mobile-beta"], "cachekeyname": ["deps-v2", "node-modules-lockfile"],
    "routingkeytext": ["R0UT1NGK3Y42", "payments-oncall"], "pagerservicename": ["PagerDuty", "Opsgenie"],
    "slackchannelname": ["#deploys", "#alerts-payments", "#team-web"],
    "bodyfontname": ["Inter", "Source Serif Pro", "Roboto"], "headingfontname": ["Poppins", "Playfair Display", "Inter"],
    "fontname": ["Helvetica Neue", "Arial", "Georgia"], "buttonlabel": ["Get started", "Sign up", "Learn more"],
    "footertext": ["2025 Acme Logistics. All rights reserved.", "Questions? Reply to this email."],
    "customdomainname": ["app.acme.com", "portal.northwind.com"],
    "certificationname": ["ISO 13485", "CE Class IIa"], "firmwareversionname": ["4.2.1", "2.0.7"],
    "emailattributename": ["user.email"], "firstnameattributename": ["user.givenname"],
    "lastnameattributename": ["user.surname"], "groupsattributename": ["user.groups"],
    "ssoprovidername": ["Okta", "Azure AD", "Google Workspace", "OneLogin"],
    "districtname": ["Riverside Unified", "Lake County Schools"],
    "elementaryschoolname": ["Lincoln Elementary", "Maple Grove Elementary"],
    "middleschoolname": ["Jefferson Middle School", "Oak Hill Middle"], "highschoolname": ["Roosevelt High School", "Westview High"],
    "exteriorcolorname": COLORS, "interiorcolorname": ["black leather", "gray cloth", "beige"],
    "makename": ["Toyota", "Ford", "Volkswagen", "Honda", "Tesla", "Subaru"],
    "modelname": ["Corolla", "F-150", "Golf", "Civic", "Model 3", "Outback"],
    "trimname": ["LE", "XLT", "GTI", "EX-L", "Long Range", "Premium"], "tirebrandname": ["Michelin", "Bridgestone", "Pirelli"],
    "tiresizename": ["225/45R17", "205/55R16", "245/40R19"], "floodzonename": ["Zone X", "Zone AE"],
    "roomname": ["Living room", "Primary bedroom", "Kitchen", "Home office"],
    "worklocationname": ["Portland HQ", "Berlin Office", "Remote"],
    "preferredlanguagename": ["English", "Spanish", "German", "Japanese"],
    "reviewcyclename": ["2024 Annual Review", "H1 2025 Check-in"],
    "goaltitle": ["Launch the new billing page", "Reduce p95 latency by 20 percent", "Mentor two new hires"],
    "githubusernametext": ["emma-dev", "lwalker", "pnakamura"], "taxidtext": ["DE123456789", "GB987654321", "US-12-3456789"],
    "ibantext": ["DE89370400440532013000", "GB29NWBK60161331926819"],
    "openinghourstext": ["Mon-Fri 9:00-18:00", "Daily 10:00-20:00"],
    "failurereason": ["card_declined", "insufficient_funds", "expired_card"],
    "productareaname": ["Billing", "Mobile app", "Search", "Integrations"],
    "lendername": ["Harbor Credit Union", "First National Bank"], "bankname": ["First National Bank", "Harbor Credit Union", "Northern Trust Savings"],
    "providername": ["BlueShield Health", "Pinecrest Insurance", "Evergreen Mutual"],
    "manufacturername": ["Medtronic", "Philips", "Omron"],
    "agencyname": ["Lighthouse Realty", "Pinecrest Insurance Agency", "Summit Homes"],
    "dealershipname": ["Riverside Motors", "Summit Auto Group"], "employername": COMPANIES, "officename": ["Downtown Office", "Westside Branch"],
    "experimentvariant": ["control", "variant_a"],
    "passportnumber": ["X12345678", "P9876543", "C01X00T47"], "stationid": ["KPDX", "EGLL", "EDDB", "YSSY"],
}
_PERSON_ROLES = ("holder", "agent", "assistant", "manager", "reviewer", "seller", "subscriber", "signature",
                 "physician", "contact", "owner", "employee", "customer", "patient", "approver", "requester")


def realistic_text(k, rng):
    first, last = person(rng)
    city, region, country = rng.choice(CITIES)
    if k in VALUES_BY_KEY:
        return rng.choice(VALUES_BY_KEY[k])
    if k.endswith("name") and any(w in k for w in _PERSON_ROLES):
        return f"{first} {last}"
    if k in ("firstname", "givenname"):
        return first
    if k in ("lastname", "surname", "familyname"):
        return last
    if k in ("username", "login", "handle"):
        return f"{first.lower()}{rng.choice(['', '_', '.'])}{last.lower()[:rng.randint(1, 5)]}{rng.choice(['', str(rng.randint(1, 99))])}"
    if k.endswith("email") or k in ("to", "cc", "bcc", "recipients", "attendees"):
        return email_of(rng, first, last)
    if k in ("name", "fullname", "displayname", "author", "assignee", "owner", "holder", "contact",
             "requester", "sender", "customer", "passenger", "guest", "recipient", "reviewer",
             "manager", "accountholder", "contactname", "createdby", "assignedto"):
        return f"{first} {last}"
    if k in ("company", "organization", "employer", "merchant", "vendor", "carrier", "publisher", "companyname", "organizationname"):
        return rng.choice(COMPANIES)
    if k in ("city", "town"):
        return city
    if k in ("state", "region", "province"):
        return region
    if k in ("country", "countryname"):
        return COUNTRIES[country]
    if k in ("street", "line1", "address1", "streetaddress", "address", "addressline1"):
        return f"{rng.randint(1, 9800)} {rng.choice(STREETS)} {rng.choice(STREET_TYPES)}"
    if k in ("line2", "address2", "addressline2"):
        return rng.choice(["Apt 4B", "Suite 210", "Floor 3", "Unit 12"])
    if k in ("phone", "phonenumber", "mobile", "fax") or k.endswith("phone"):
        return "+1 %03d %03d %04d" % (rng.randint(201, 989), rng.randint(200, 999), rng.randint(0, 9999))
    if "postal" in k or "zip" in k:
        return "%05d" % rng.randint(10000, 99999)
    if k in ("productname", "product", "item", "itemname") or k == "productname":
        return product_name(rng)
    if k in ("brand", "manufacturer"):
        return rng.choice(BRANDS)
    if k in ("bio", "about", "tagline"):
        return rng.choice(BIOS)
    if k in ("review", "reviewbody", "comment", "feedback", "body") or "review" in k:
        return rng.choice(REVIEWS)
    if k in ("message", "logmessage", "msg"):
        return rng.choice(LOG_MESSAGES)
    if "gift" in k:
        return rng.choice(["Happy birthday! Hope you love it.", "Congratulations on the new home!", "With thanks from the whole team."])
    if k.endswith("message") or k.endswith("messagetext"):
        return rng.choice(MESSAGES)
    if "tracking" in k:
        return "1Z%03d%012d" % (rng.randint(100, 999), rng.randint(0, 10 ** 12 - 1))
    if "loyalty" in k:
        return "FF%08d" % rng.randint(0, 10 ** 8 - 1)
    if "descriptor" in k:
        return rng.choice(COMPANIES).upper()[:22].strip()
    if "question" in k:
        return "q%d" % rng.randint(1, 20)
    if k.endswith("notes") or k.endswith("note"):
        return sentences(rng, SENTENCES, 1, 1)
    if "account" in k and "name" in k:
        return rng.choice(SERVICES) + "-sa"
    if k in ("text", "content", "reply", "lastmessage", "preview"):
        return rng.choice(MESSAGES)
    if k in ("subject", "issue", "summary") or "ticket" in k:
        return rng.choice(TICKET_TEXT)
    if k in ("step", "steps", "instruction", "instructions", "directions"):
        return rng.choice(STEPS)
    if k in ("ingredient", "ingredients", "ingredientname"):
        return rng.choice(INGREDIENTS)
    if k in ("cuisine",):
        return rng.choice(CUISINES)
    if k in ("title", "headline", "eventname", "meetingtitle", "subtitle", "metatitle", "heading"):
        return rng.choice(TITLES)
    if "description" in k or k in ("notes", "note", "details", "reason", "instructions", "remarks", "explanation", "resolution"):
        return sentences(rng, SENTENCES, 1, 2)
    if k in ("tag", "tags", "label", "labels", "keyword", "keywords", "category", "categories", "topic", "topics", "interests"):
        return rng.choice(TAGS)
    if k in ("skill", "skills", "requirements", "requirement", "qualifications"):
        return rng.choice(SKILLS)
    if k in ("department", "team", "division"):
        return rng.choice(DEPARTMENTS)
    if k in ("jobtitle", "position", "role", "occupation"):
        return rng.choice(JOB_TITLES)
    if "url" in k or k in ("website", "homepage", "href", "link", "endpoint", "avatar", "image", "images", "photo", "photos", "thumbnail"):
        path = rng.choice(["images/" + hexs(rng, 8) + ".jpg", "docs/getting-started", "products/" + slug(rng), "u/" + first.lower()])
        return f"https://{rng.choice(['www.example.com', 'cdn.example.net', 'shop.example.org'])}/{path}"
    if "origin" in k:
        return rng.choice(["https://app.example.com", "https://www.example.org", "http://localhost:3000"])
    if k.endswith("plan"):
        return rng.choice(["Restore the previous release from the snapshot taken before the window.",
                           "Fail over to the standby region and roll back the schema change."])
    if "thread" in k:
        return rng.choice(["main", "worker-3", "http-nio-8080-exec-2", "scheduler-1"])
    if k.endswith("port"):
        return rng.choice(["http", "https", "metrics", "grpc"])
    if k in ("host", "hostname", "hosts", "server", "node", "nodename"):
        return rng.choice(HOSTS)
    if k in ("service", "servicename", "logger", "component", "source", "app", "appname", "application"):
        return rng.choice(SERVICES)
    if "image" in k or k == "containerimage":
        return f"registry.example.com/{rng.choice(SERVICES)}:{rng.randint(1, 3)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
    if k in ("timezone", "tz"):
        return rng.choice(TIMEZONES)
    if k in ("locale", "language", "lang"):
        return rng.choice(LOCALES)
    if k in ("color", "colour", "colorname"):
        return rng.choice(COLORS)
    if k in ("location", "venue", "place", "destinationname", "origincity", "locationname"):
        return f"{rng.choice(['Conference Room B', 'Main Hall', 'Harbor Cafe', 'Room 204', city + ' Office'])}"
    if k in ("path", "filepath", "file", "filename", "attachment"):
        return rng.choice(["report-q3.pdf", "invoice_2024_0312.pdf", "photo.jpg", "notes.txt", "data/export.csv"])
    if k in ("query", "searchquery", "q", "searchterm"):
        return rng.choice(["waterproof hiking boots", "italian restaurants near me", "quarterly revenue by region", "wireless headphones under 100"])
    if k in ("namespace",):
        return rng.choice(["production", "staging", "default", "payments", "monitoring"])
    if k.endswith("id") or k.endswith("ref") or k in ("id", "reference", "code", "identifier"):
        return rng.choice(["usr_", "ord_", "evt_", "acct_", "txn_", "prd_"]) + hexs(rng, 10)
    if k in ("version", "appversion", "apiversion"):
        return "%d.%d.%d" % (rng.randint(1, 5), rng.randint(0, 20), rng.randint(0, 9))
    if k in ("unit", "units"):
        return rng.choice(["kg", "g", "cm", "ml", "pcs"])
    if k in ("currency",):
        return rng.choice(CURRENCIES)
    if k in ("useragent",):
        return "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_2) AppleWebKit/605.1.15 Safari/605.1.15"
    if k in ("method", "httpmethod"):
        return rng.choice(["GET", "POST", "PUT", "DELETE"])
    if k in ("value", "values", "val"):
        return rng.choice(["enabled", "production", "42", "eu-west-1", "blue", "true", "weekly digest"])
    if k in ("answer", "response", "answers"):
        return rng.choice(["Very satisfied with the onboarding process.", "The pricing page was confusing.", "Yes", "Mostly, but the app is slow on weekends."])
    if k in ("symbol", "ticker"):
        return rng.choice(TICKERS)
    if k in ("species", "breed"):
        return rng.choice(["Golden Retriever", "Siamese", "Beagle", "Maine Coon"])
    if "password" in k or "secret" in k or "token" in k or "key" in k:
        return "sk_live_" + hexs(rng, 16)
    if k.endswith("name"):
        return rng.choice(["Harbor View", "Maple Grove", "Riverside", "Summit Ridge", "Blue Door Bistro",
                           "Cedar Point", "Northside Studio", "Lakeshore"])
    return rng.choice(["standard", "weekly digest", "north region", "primary", "customer portal",
                       "default settings", "internal use only", "pending review", "spring campaign",
                       "night shift", "main warehouse", "partner program"])


def realistic_number(k, rng):
    if "lat" in k and "lon" not in k:
        return round(rng.uniform(-60, 70), 5)
    if k in ("lon", "lng", "longitude") or k.endswith("longitude"):
        return round(rng.uniform(-150, 150), 5)
    if k in ("coordinates", "coordinate", "position", "point", "bbox", "ring"):
        return round(rng.uniform(-80, 80), 4)
    if any(w in k for w in ("price", "amount", "total", "subtotal", "cost", "balance", "fee", "revenue", "salary", "budget", "value", "spend", "tax", "shipping", "discountamount", "refund")):
        return round(rng.uniform(3, 900), 2)
    if any(w in k for w in ("quantity", "qty", "seats", "servings", "adults", "guests", "passengers", "children", "items", "rooms", "replicas", "workers", "attempts", "retries")):
        return rng.randint(1, 6)
    if k in ("age",):
        return rng.randint(19, 74)
    if "years" in k:
        return rng.randint(1, 15)
    if "birthyear" in k:
        return rng.randint(1890, 1990)
    if "deathyear" in k:
        return rng.randint(1950, 2024)
    if "doors" in k:
        return rng.randint(2, 5)
    if "cylinders" in k:
        return rng.choice([3, 4, 6, 8])
    if any(w in k for w in ("bedrooms", "bathrooms", "floors", "baggage", "goals")):
        return rng.randint(1, 4)
    if "mileage" in k:
        return rng.randint(5000, 150000)
    if "range" in k:
        return rng.randint(250, 600)
    if "wordcount" in k:
        return rng.randint(400, 3000)
    if "level" in k:
        return rng.randint(1, 60)
    if "year" in k:
        return rng.randint(2015, 2025)
    if "month" in k:
        return rng.randint(1, 12)
    if "rating" in k or "stars" in k:
        return rng.choice([3, 4, 4.5, 5, 3.5])
    if any(w in k for w in ("percent", "humidity", "progress", "discount", "score", "probability", "confidence", "utilization", "coverage")):
        return round(rng.uniform(5, 95), 1)
    if k.endswith("port"):
        return rng.choice([80, 443, 5432, 6379, 8080, 9090, 3000])
    if any(w in k for w in ("seconds", "ttl", "interval")):
        return rng.choice([30, 60, 180, 240, 300, 900, 3600])
    if "minutes" in k:
        return rng.choice([5, 10, 15, 20, 30, 45, 60, 90])
    if any(w in k for w in ("ms", "millis", "latency", "duration", "timeout", "elapsed")):
        return rng.choice([12, 45, 120, 250, 800, 1500, 3000])
    if "connections" in k:
        return rng.choice([50, 100, 200, 500])
    if "population" in k:
        return rng.randint(1000, 9000000)
    if k.endswith("c") and any(w in k for w in ("dew", "feels", "temperature")):
        return round(rng.uniform(-5, 30), 1)
    if any(w in k for w in ("days", "weeks")):
        return rng.choice([1, 3, 7, 14, 30])
    if any(w in k for w in ("temperature", "temp", "high", "low")):
        return round(rng.uniform(-5, 32), 1)
    if any(w in k for w in ("weight", "kg", "mass")):
        return round(rng.uniform(0.2, 25), 2)
    if any(w in k for w in ("width", "height", "depth", "length", "cm", "size")):
        return rng.choice([12, 24, 30.5, 45, 60, 120])
    if any(w in k for w in ("views", "likes", "followers", "stock", "inventory", "visits", "clicks", "points")):
        return rng.randint(0, 5000)
    if "count" in k:
        return rng.choice([0, 1, 2, 3, 5, 8, 12, 24, 40, 120])
    if any(w in k for w in ("calories", "kcal")):
        return rng.randint(120, 900)
    if k.endswith("g") and len(k) > 2:
        return rng.randint(2, 60)
    if "status" in k or k == "code":
        return rng.choice([200, 201, 204, 301, 400, 401, 404, 500, 503])
    if "pressure" in k:
        return round(rng.uniform(990, 1030), 1)
    if "speed" in k or "wind" in k:
        return round(rng.uniform(0, 60), 1)
    if "page" in k or "limit" in k or "perpage" in k:
        return rng.choice([1, 2, 10, 20, 25, 50, 100])
    if "pid" in k:
        return rng.randint(1000, 65000)
    return None


# ====================================================================== schema helpers

def string(lo=None, hi=None, **kw):
    s = {"type": "string"}
    if lo is not None:
        s["minLength"] = lo
    if hi is not None:
        s["maxLength"] = hi
    s.update(kw)
    return s


def fmt(f, **kw):
    return {"type": "string", "format": f, **kw}


def pat(p, **kw):
    assert p in schema_instances.PATTERNS, p
    return {"type": "string", "pattern": p, **kw}


def integer(lo=None, hi=None, **kw):
    s = {"type": "integer"}
    if lo is not None:
        s["minimum"] = lo
    if hi is not None:
        s["maximum"] = hi
    s.update(kw)
    return s


def number(lo=None, hi=None, **kw):
    s = {"type": "number"}
    if lo is not None:
        s["minimum"] = lo
    if hi is not None:
        s["maximum"] = hi
    s.update(kw)
    return s


def boolean(**kw):
    return {"type": "boolean", **kw}


def enum(values, typed=True, **kw):
    s = {"type": "string", "enum": list(values)} if typed else {"enum": list(values)}
    s.update(kw)
    return s


def array(items, lo=None, hi=None, **kw):
    s = {"type": "array", "items": items}
    if lo is not None:
        s["minItems"] = lo
    if hi is not None:
        s["maxItems"] = hi
    s.update(kw)
    return s


def obj(props, required=None, extra=False, **kw):
    s = {"type": "object", "properties": props}
    if required is None:
        required = list(props)
    if required:
        s["required"] = list(required)
    if extra is not None:
        s["additionalProperties"] = extra
    s.update(kw)
    return s


def nullable(s):
    s = dict(s)
    t = s.get("type")
    if isinstance(t, str):
        s["type"] = [t, "null"]
        if "enum" in s:
            s["enum"] = s["enum"] + [None]
        return s
    return {"anyOf": [s, {"type": "null"}]}


def ref(name):
    return {"$ref": "#/$defs/" + name}


def string_map(value=None):
    return {"type": "object", "additionalProperties": value or string(0, 80)}


# Enumerations by field name.
ENUMS = {
    "status": ["active", "inactive", "pending", "suspended"],
    "order_status": ["pending", "paid", "shipped", "delivered", "cancelled", "refunded"],
    "payment_status": ["requires_payment", "authorized", "captured", "failed", "refunded"],
    "invoice_status": ["draft", "sent", "paid", "overdue", "void"],
    "ticket_status": ["new", "open", "pending", "on_hold", "solved", "closed"],
    "priority": ["low", "normal", "high", "urgent"],
    "role": ["admin", "editor", "viewer", "billing"],
    "roles": ["admin", "editor", "viewer", "billing", "support"],
    "environment": ["development", "staging", "production"],
    "log_level": ["trace", "debug", "info", "warn", "error", "fatal"],
    "level": ["debug", "info", "warning", "error", "critical"],
    "gender": ["female", "male", "non_binary", "prefer_not_to_say"],
    "plan": ["free", "starter", "pro", "business", "enterprise"],
    "category": ["electronics", "home", "kitchen", "outdoor", "apparel", "office", "toys", "beauty"],
    "channel": ["email", "chat", "phone", "web", "mobile_app"],
    "unit": ["celsius", "fahrenheit"],
    "cabin": ["economy", "premium_economy", "business", "first"],
    "difficulty": ["easy", "medium", "hard"],
    "employment_type": ["full_time", "part_time", "contract", "internship"],
    "remote": ["on_site", "hybrid", "remote"],
    "payment_terms": ["due_on_receipt", "net_15", "net_30", "net_60"],
    "visibility": ["public", "private", "unlisted"],
    "theme": ["light", "dark", "system"],
    "frequency": ["daily", "weekly", "monthly", "never"],
    "direction": ["inbound", "outbound"],
    "condition": ["new", "like_new", "good", "fair", "refurbished"],
    "conditions": ["sunny", "partly_cloudy", "cloudy", "rain", "snow", "thunderstorm", "fog"],
    "size": ["XS", "S", "M", "L", "XL"],
    "method": ["GET", "POST", "PUT", "PATCH", "DELETE"],
    "protocol": ["TCP", "UDP"],
    "sort_order": ["asc", "desc"],
    "device_type": ["desktop", "mobile", "tablet"],
    "transaction_type": ["debit", "credit"],
    "spending_category": ["groceries", "rent", "salary", "utilities", "dining", "travel", "entertainment", "transfer"],
    "day_of_week": ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"],
    "billing_cycle": ["monthly", "quarterly", "yearly"],
    "shipping_method": ["standard", "express", "overnight", "pickup"],
    "fuel_type": ["gasoline", "diesel", "hybrid", "electric"],
    "transmission": ["automatic", "manual"],
    "blood_type": ["A+", "A-", "B+", "B-", "AB+", "AB-", "O+", "O-"],
    "property_type": ["house", "apartment", "condo", "townhouse", "land"],
    "response": ["accepted", "declined", "tentative", "needs_action"],
    "sender_role": ["user", "assistant", "system", "agent"],
    "attachment_type": ["image", "file", "link", "video"],
    "recurrence": ["daily", "weekly", "biweekly", "monthly"],
    "mime_type": ["application/pdf", "image/png", "image/jpeg", "text/csv", "text/plain"],
    "card_brand": ["visa", "mastercard", "amex", "discover"],
    "relationship_type": ["spouse", "parent", "child", "sibling", "friend"],
    "coverage_type": ["individual", "family", "employee_plus_one"],
    "body_type": ["sedan", "suv", "hatchback", "coupe", "pickup", "wagon"],
    "seller_type": ["private", "dealer"],
    "emission_level": ["euro_5", "euro_6", "zero_emission"],
    "access_level": ["standard", "elevated", "admin"],
    "trigger_type": ["push", "pull_request", "schedule", "manual"],
    "strategy_type": ["rolling", "blue_green", "canary"],
    "restore_strategy": ["exact", "prefix", "fallback_to_default"],
    "storage_policy": ["standard", "infrequent_access", "archive"],
    "rate_limit_policy": ["fixed_window", "sliding_window", "token_bucket"],
    "accrual_policy": ["monthly", "per_pay_period", "annual"],
    "request_type": ["vacation", "sick", "personal", "parental"],
    "request_status": ["submitted", "approved", "rejected", "cancelled"],
    "pay_frequency_type": ["weekly", "biweekly", "monthly"],
    "last_rating_level": ["below_expectations", "meets_expectations", "exceeds_expectations", "outstanding"],
    "energy_rating_level": ["A", "B", "C", "D", "E", "F", "G"],
    "industry_type": ["software", "healthcare", "retail", "finance", "education", "manufacturing"],
    "listing_status": ["active", "pending", "sold", "withdrawn"],
    "uv_index_level": ["low", "moderate", "high", "very_high", "extreme"],
    "default_role": ["admin", "editor", "viewer"],
    "experiment_variant": ["control", "variant_a", "variant_b"],
    "region": ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1"],
    "target_environment_name": ["development", "staging", "production"],
    "weather_type": ["clear", "rain", "storm", "snow", "fog"],
    "connector_type": ["CCS", "CHAdeMO", "Type 2", "NACS"],
    "quest_status": ["not_started", "in_progress", "completed", "failed"],
}


def infer(name, rng):
    """A schema for a field, from its name (explicit table, then suffixes)."""
    n = name
    r = rng
    explicit = {
        "id": lambda: r.choice([fmt("uuid"), integer(1), string(3, 40)]),
        "uuid": lambda: fmt("uuid"),
        "username": lambda: string(3, 24),
        "email": lambda: fmt("email"),
        "first_name": lambda: string(1, 40),
        "last_name": lambda: string(1, 40),
        "full_name": lambda: string(1, 80),
        "display_name": lambda: string(1, 60),
        "name": lambda: string(1, r.choice([60, 80, 120])),
        "age": lambda: r.choice([integer(0, r.choice([120, 130])), integer(0, exclusiveMaximum=150)]),
        "birth_date": lambda: fmt("date"),
        "date_of_birth": lambda: fmt("date"),
        "phone": lambda: r.choice([string(7, 20), pat("^\\+[1-9]\\d{6,14}$")]),
        "bio": lambda: string(0, 280),
        "locale": lambda: r.choice([pat("^[a-z]{2}-[A-Z]{2}$"), enum(LOCALES)]),
        "timezone": lambda: enum(TIMEZONES),
        "language": lambda: pat("^[a-z]{2}$"),
        "country": lambda: r.choice([pat("^[A-Z]{2}$"), string(2, 60)]),
        "country_code": lambda: pat("^[A-Z]{2}$"),
        "currency": lambda: r.choice([pat("^[A-Z]{3}$"), enum(CURRENCIES[:5])]),
        "postal_code": lambda: r.choice([pat("^\\d{5}(-\\d{4})?$"), string(3, 10)]),
        "street": lambda: string(1, 120),
        "city": lambda: string(1, 80),
        "state": lambda: string(1, 60),
        "latitude": lambda: number(-90, 90),
        "longitude": lambda: number(-180, 180),
        "sku": lambda: pat("^[A-Z]{3}-\\d{4}$"),
        "order_id": lambda: pat("^ORD-\\d{6}$"),
        "order_number": lambda: pat("^ORD-\\d{6}$"),
        "invoice_number": lambda: pat("^INV-\\d{4}-\\d{4}$"),
        "ticket_id": lambda: pat("^TCK-\\d{5}$"),
        "slug": lambda: pat("^[a-z0-9]+(-[a-z0-9]+)*$"),
        "color_hex": lambda: pat("^#[0-9a-fA-F]{6}$"),
        "version": lambda: pat("^\\d+\\.\\d+\\.\\d+$"),
        "trace_id": lambda: pat("^[0-9a-f]{32}$"),
        "span_id": lambda: pat("^[0-9a-f]{16}$"),
        "price": lambda: number(0, r.choice([None, 10000])),
        "quantity": lambda: r.choice([integer(1, r.choice([10, 99, 1000])),
                                      {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000}]),
        "tags": lambda: array(string(1, 24), 0, r.choice([3, 5, 8])),
        "roles": lambda: array(enum(ENUMS["roles"]), 1, 3),
        "rating": lambda: number(1, 5),
        "stars": lambda: integer(1, 5),
        "port": lambda: r.choice([integer(1, 65535), {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 65536}]),
        "replicas": lambda: integer(0, 50),
        "website": lambda: string(0, 200),
        "url": lambda: string(1, 300),
        "description": lambda: string(0, r.choice([300, 500, 1000])),
        "notes": lambda: nullable(string(0, 500)),
        "title": lambda: string(1, 120),
        "summary": lambda: string(0, 300),
        "message": lambda: string(1, 500),
        "year": lambda: integer(1900, 2100),
        "month": lambda: integer(1, 12),
        "humidity_percent": lambda: integer(0, 100),
        "discount_percent": lambda: number(0, 100),
        "tax_rate": lambda: number(0, 1),
        "score": lambda: number(0, 100),
        "nps": lambda: integer(0, 10),
        "is_active": lambda: boolean(),
        "enabled": lambda: boolean(),
        "satisfaction_rating": lambda: integer(1, 5),
        "coupon_code": lambda: nullable(pat("^[A-Z0-9]{6}$")),
        "tracking_number": lambda: string(8, 30),
        "po_number": lambda: pat("^[A-Z0-9]{6}$"),
        "maintenance_mode": lambda: boolean(default=False),
        "pid": lambda: integer(1),
        "statement_descriptor": lambda: string(1, 22),
        "loyalty_number": lambda: nullable(string(6, 20)),
        "total_debits": lambda: number(0),
        "total_credits": lambda: number(0),
        "subtotal": lambda: number(0),
        "total": lambda: number(0),
        "tax": lambda: number(0),
        "host": lambda: string(1, 253),
        "location": lambda: string(1, 120),
        "brand": lambda: string(1, 60),
        "department": lambda: enum(DEPARTMENTS),
        "cuisine": lambda: enum(CUISINES),
        "digest_frequency": lambda: enum(ENUMS["frequency"]),
        "year_built": lambda: integer(1800, 2030),
        "start_time": lambda: fmt("time"),
        "end_time": lambda: fmt("time"),
    }
    if n in explicit:
        return explicit[n]()
    if n in ENUMS:
        return enum(ENUMS[n])
    if n.startswith(("is_", "has_", "allow_", "enable_", "show_", "require_", "send_", "auto_", "use_", "includes_")) or \
            n.endswith(("_enabled", "_required", "_visible", "_verified", "_allowed", "_opt_in", "_selected", "_eligible")):
        return boolean()
    if n.endswith(("_at", "_time", "timestamp")):
        return fmt("date-time")
    if n.endswith("_date") or n in ("date", "start_date", "end_date"):
        return fmt("date")
    if n.endswith("_hex"):
        return pat("^#[0-9a-fA-F]{6}$")
    if n.endswith("_country_code"):
        return pat("^[A-Z]{2}$")
    if n.endswith("_phone"):
        return string(7, 20)
    if n.endswith(("_email", "_contact_email")):
        return fmt("email")
    if n.endswith(("_uuid", "_guid")):
        return fmt("uuid")
    if n.endswith("_id"):
        return r.choice([fmt("uuid"), string(4, 40), integer(1)])
    if n.endswith(("_url", "_uri", "_link")):
        return string(1, 300)
    if n.endswith(("_count", "_total_count", "_limit", "_days", "_minutes", "_hours", "_seconds", "_ms", "_retries", "_attempts", "_per_page", "_size_mb", "_years", "_months",
                     "_per_minute")) \
            or n.startswith(("max_", "min_", "num_")):
        lo = 0
        hi = r.choice([10, 100, 1000, 100000, None])
        return integer(lo, hi)
    if n.endswith(("_percent", "_pct", "_score")):
        return number(0, 100)
    if n.endswith(("_amount", "_price", "_cost", "_fee", "_total", "_balance", "_kg", "_cm", "_km", "_g", "_mm", "_c", "_hpa", "_kmh", "_kw", "_nm")) or \
            n in ("subtotal", "total", "tax", "amount", "balance"):
        return number(0 if not n.endswith("_c") else -90, None if not n.endswith("_c") else 60)
    if n.endswith(("_type", "_mode", "_level", "_status", "_policy", "_strategy")):
        vals = {"_type": ["standard", "premium", "custom"], "_mode": ["auto", "manual", "off"],
                "_level": ["low", "medium", "high"], "_status": ["active", "pending", "disabled"],
                "_policy": ["allow", "deny", "ask"], "_strategy": ["rolling", "recreate", "blue_green"]}
        return enum(vals["_" + n.rsplit("_", 1)[1]])
    if n.endswith(("_name", "_title", "_label")):
        return string(1, 80)
    if n.endswith(("_description", "_notes", "_message", "_text", "_body", "_comment", "_reason")):
        return string(0, 400)
    if n.endswith(("_tags", "_list", "_keywords", "s")) and not n.endswith(("ss", "us", "status")):
        return array(string(1, 40), 0, 5)
    return string(0, 80)


# ====================================================================== families
# A family: core fields (always present), a pool of optional fields, and
# sub-objects. compose() picks a random subset and random structure options.

def address_schema(rng):
    props = {"street": string(1, 120), "city": string(1, 80)}
    if rng.random() < 0.6:
        props["line2"] = nullable(string(0, 60))
    props["state"] = string(0, 60)
    props["postal_code"] = infer("postal_code", rng)
    props["country"] = pat("^[A-Z]{2}$")
    req = ["street", "city", "country"] + (["postal_code"] if rng.random() < 0.6 else [])
    return obj(props, req, extra=rng.choice([False, False, None]),
               title="Address", description="A postal address.")


def money_schema(rng):
    return obj({"amount": number(0), "currency": pat("^[A-Z]{3}$")}, extra=False, title="Money")


def person_schema(rng):
    return obj({"name": string(1, 80), "email": fmt("email"), "phone": nullable(string(7, 20))},
               ["name", "email"], extra=False)


def line_item_schema(rng):
    props = {"sku": infer("sku", rng), "product_name": string(1, 120),
             "quantity": integer(1, 99), "unit_price": number(0)}
    if rng.random() < 0.5:
        props["discount_percent"] = number(0, 100)
    if rng.random() < 0.4:
        props["options"] = string_map(string(0, 40))
    return obj(props, ["sku", "quantity", "unit_price"], extra=False)


def payment_method_schema(rng):
    card = obj({"type": {"const": "card"}, "brand": enum(ENUMS["card_brand"]),
                "last4": pat("^\\d{4}$"), "exp_month": integer(1, 12), "exp_year": integer(2024, 2040)},
               ["type", "brand", "last4"], extra=False)
    paypal = obj({"type": {"const": "paypal"}, "payer_email": fmt("email")}, extra=False)
    bank = obj({"type": {"const": "bank_transfer"}, "iban": pat("^[A-Z]{2}\\d{2}[A-Z0-9]{12,30}$"),
                "account_holder": string(1, 80)}, ["type", "iban"], extra=False)
    return {"anyOf": rng.sample([card, paypal, bank], rng.choice([2, 3]))}


SUB = {  # named sub-objects, built fresh per use
    "address": address_schema, "shipping_address": address_schema, "billing_address": address_schema,
    "home_address": address_schema, "money": money_schema, "customer": person_schema,
    "requester": person_schema, "author": person_schema, "contact": person_schema,
    "payment_method": payment_method_schema,
    "line_items": lambda r: array(line_item_schema(r), 1, r.choice([3, 4, 5])),
    "items": lambda r: array(line_item_schema(r), 1, 4),
    "preferences": lambda r: obj({"theme": enum(ENUMS["theme"], default="system"),
                                  "newsletter_opt_in": boolean(default=False),
                                  "language": pat("^[a-z]{2}$"),
                                  "digest_frequency": enum(ENUMS["frequency"])},
                                 r.sample(["theme", "newsletter_opt_in"], r.randint(0, 2)), extra=False),
    "social_links": lambda r: obj({"twitter": nullable(pat("^@[a-z0-9_]{2,15}$")), "github": nullable(string(1, 39)),
                                   "linkedin": nullable(string(1, 200))}, [], extra=False),
    "dimensions": lambda r: r.choice([
        obj({"width_cm": number(0), "height_cm": number(0), "depth_cm": number(0)}, extra=False),
        {"type": "array", "prefixItems": [number(0), number(0), number(0)], "items": False, "minItems": 3,
         "description": "Width, height and depth in centimeters."}]),
    "device": lambda r: obj({"device_type": enum(ENUMS["device_type"]), "os": enum(["iOS", "Android", "Windows", "macOS", "Linux"]),
                             "browser": nullable(enum(["Chrome", "Safari", "Firefox", "Edge"])),
                             "app_version": pat("^\\d+\\.\\d+\\.\\d+$")}, ["device_type", "os"], extra=False),
    "geo": lambda r: r.choice([
        obj({"city": string(1, 80), "country": pat("^[A-Z]{2}$"), "latitude": number(-90, 90),
             "longitude": number(-180, 180)}, ["country"], extra=False),
        obj({"city": string(1, 80), "country": pat("^[A-Z]{2}$"),
             "coordinates": {"type": "array", "prefixItems": [number(-90, 90), number(-180, 180)],
                             "items": False, "minItems": 2, "description": "Latitude, longitude."}},
            ["country", "coordinates"], extra=False)]),
    "campaign": lambda r: obj({"source": string(1, 40), "medium": enum(["email", "cpc", "social", "organic", "referral"]),
                               "name": string(1, 80)}, ["source", "medium"], extra=False),
    "metadata": lambda r: r.choice([{"type": "object"}, string_map(), {"type": "object", "additionalProperties": True}]),
    "custom_fields": lambda r: {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean", "null"]}},
    "attendees": lambda r: array(obj({"name": string(1, 80), "email": fmt("email"), "response": enum(ENUMS["response"]),
                                      "optional": boolean(default=False)}, ["email"], extra=False), 1, r.choice([3, 4, 6])),
    "reminders": lambda r: array(integer(0, 10080, description="Minutes before the start."), 0, 3),
    "seo": lambda r: obj({"meta_title": string(0, 60), "meta_description": string(0, 160),
                          "canonical_url": nullable(string(1, 300))}, ["meta_title"], extra=False),
    "nutrition": lambda r: obj({"calories": integer(0, 5000), "protein_g": number(0), "fat_g": number(0),
                                "carbs_g": number(0)}, ["calories"], extra=False),
    "salary": lambda r: obj({"min_amount": integer(0), "max_amount": integer(0), "currency": pat("^[A-Z]{3}$"),
                             "period": enum(["hour", "month", "year"])}, ["currency", "period"], extra=False),
    "wind": lambda r: obj({"speed_kmh": number(0, 400), "direction_deg": integer(0, exclusiveMaximum=360),
                           "gust_kmh": nullable(number(0, 400))}, ["speed_kmh", "direction_deg"], extra=False),
    "sla": lambda r: obj({"first_response_due_at": fmt("date-time"), "resolution_due_at": fmt("date-time"),
                          "is_breached": boolean()}, ["is_breached"], extra=False),
    "reactions": lambda r: {"type": "object", "additionalProperties": integer(1, 1000)},
    "period": lambda r: obj({"start_date": fmt("date"), "end_date": fmt("date")}, extra=False),
    "card": lambda r: obj({"brand": enum(ENUMS["card_brand"]), "last4": pat("^\\d{4}$"), "exp_month": integer(1, 12),
                           "exp_year": integer(2024, 2040)}, extra=False),
    "merchant": lambda r: obj({"name": string(1, 80), "category_code": pat("^\\d{4}$"), "city": string(1, 80),
                               "country": pat("^[A-Z]{2}$")}, ["name"], extra=False),
    "http": lambda r: obj({"method": enum(ENUMS["method"]), "path": pat("^/[a-z0-9/_-]*$"),
                           "status_code": integer(100, 599), "duration_ms": integer(0),
                           "user_agent": string(0, 300)}, ["method", "path", "status_code"], extra=False),
    "error": lambda r: nullable(obj({"type": string(1, 80), "message": string(0, 300),
                                     "stack": array(string(0, 200), 0, 4)}, ["type", "message"], extra=False)),
}


FAMILIES = {
    "user": dict(
        subtypes=["user_profile", "user_signup_request", "user_admin_view", "user_public_card", "user_update"],
        core=["id", "username", "email"],
        pool=["first_name", "last_name", "display_name", "age", "birth_date", "phone", "bio", "locale",
              "timezone", "is_verified", "roles", "tags", "created_at", "last_login_at", "status", "plan",
              "address", "preferences", "social_links", "avatar_url", "gender", "metadata", "followers_count"]),
    "order": dict(
        subtypes=["order", "order_created_webhook", "checkout_request", "order_summary", "return_request"],
        core=["order_id", "line_items"],
        pool=["customer", "shipping_address", "billing_address", "order_status", "placed_at", "subtotal",
              "tax", "shipping_cost", "total", "currency", "payment_method", "coupon_code", "notes",
              "shipping_method", "is_gift", "gift_message", "estimated_delivery_date", "tracking_number", "metadata"]),
    "product": dict(
        subtypes=["product", "catalog_item", "product_listing", "inventory_record", "marketplace_offer"],
        core=["sku", "name", "price"],
        pool=["description", "currency", "category", "brand", "tags", "in_stock_count", "is_available",
              "dimensions", "weight_kg", "images", "rating", "review_count", "condition", "color_hex",
              "discount_percent", "created_at", "release_date", "warranty_months", "custom_fields", "size"]),
    "analytics_event": dict(
        subtypes=["analytics_event", "tracking_event", "clickstream_record", "conversion_event", "app_event"],
        core=["event_id", "event_name", "occurred_at"],
        pool=["user_id", "session_id", "device", "geo", "campaign", "page_url", "referrer_url", "viewport",
              "duration_ms", "revenue_amount", "currency", "metadata", "is_bot", "experiment_variant"]),
    "calendar_event": dict(
        subtypes=["calendar_event", "meeting_invite", "webinar", "appointment", "conference_session"],
        core=["title", "start_at", "end_at"],
        pool=["description", "location", "attendees", "is_all_day", "timezone", "recurrence", "reminders",
              "organizer_email", "visibility", "meeting_url", "created_at", "color_hex", "max_attendees_count"]),
    "invoice": dict(
        subtypes=["invoice", "credit_note", "quote", "purchase_order", "receipt"],
        core=["invoice_number", "issue_date", "line_items"],
        pool=["due_date", "customer", "billing_address", "subtotal", "tax", "total", "currency",
              "invoice_status", "payment_terms", "notes", "po_number", "paid_at", "discount_amount", "tax_rate"]),
    "app_config": dict(
        subtypes=["service_config", "feature_settings", "database_settings", "worker_config", "gateway_config"],
        core=["app_name", "environment"],
        pool=["log_level", "port", "host", "debug_enabled", "max_connections", "request_timeout_ms",
              "allowed_origins", "database", "cache", "features", "retry", "workers_count", "region",
              "version", "maintenance_mode", "rate_limit_per_minute"]),
    "log_record": dict(
        subtypes=["log_record", "access_log", "audit_log_entry", "error_report", "trace_span"],
        core=["timestamp", "level", "message"],
        pool=["service", "host", "trace_id", "span_id", "pid", "thread_name", "http", "error",
              "context", "user_id", "request_id", "duration_ms", "environment", "version"]),
    "payment": dict(
        subtypes=["payment_intent", "charge", "refund", "payout", "transfer"],
        core=["id", "amount", "currency", "payment_status"],
        pool=["card", "merchant", "created_at", "captured_at", "description", "customer", "risk_score",
              "receipt_email", "metadata", "failure_reason", "fee_amount", "is_live_mode", "statement_descriptor"]),
    "article": dict(
        subtypes=["blog_post", "news_article", "knowledge_base_page", "changelog_entry", "newsletter_issue"],
        core=["id", "slug", "title", "author"],
        pool=["subtitle", "summary", "published_at", "updated_at", "tags", "word_count", "reading_time_minutes",
              "article_status", "seo", "is_featured", "cover_image_url", "language", "comments_enabled", "category"]),
    "ticket": dict(
        subtypes=["support_ticket", "bug_report", "incident", "feature_request", "service_request"],
        core=["ticket_id", "subject", "requester"],
        pool=["description", "priority", "ticket_status", "channel", "created_at", "assignee_email", "tags",
              "sla", "custom_fields", "due_date", "resolution_notes", "satisfaction_rating", "product_area_name"]),
    "weather": dict(
        subtypes=["weather_observation", "sensor_reading", "air_quality_report", "station_status", "forecast_day"],
        core=["station_id", "observed_at", "temperature_c"],
        pool=["humidity_percent", "pressure_hpa", "wind", "conditions", "precipitation_mm", "geo",
              "uv_index_level", "visibility_km", "rgb", "dew_point_c", "is_calibrated", "battery_percent", "feels_like_c"]),
    "job": dict(
        subtypes=["job_posting", "candidate_profile", "job_application", "interview_feedback", "offer_letter"],
        core=["title", "company_name", "employment_type"],
        pool=["description", "remote", "salary", "requirements", "benefits", "posted_date", "closing_date",
              "experience_years", "department", "city", "country_code", "hiring_manager_email", "is_urgent", "skills"]),
    "recipe": dict(
        subtypes=["recipe", "meal_plan_entry", "menu_item", "cooking_class", "grocery_list"],
        core=["name", "ingredients", "servings"],
        pool=["description", "prep_time_minutes", "cook_time_minutes", "difficulty", "cuisine", "steps",
              "nutrition", "tags", "is_vegetarian", "rating", "author", "source_url", "created_at"]),
    "trip": dict(
        subtypes=["flight_booking", "itinerary", "hotel_reservation", "car_rental", "travel_request"],
        core=["booking_reference", "passengers", "flights"],
        pool=["total_price", "currency", "booking_status", "contact", "booked_at", "special_requests_notes",
              "is_refundable", "loyalty_number", "insurance_selected", "baggage_count"]),
    "survey": dict(
        subtypes=["survey_response", "nps_feedback", "poll_vote", "course_evaluation", "exit_interview"],
        core=["survey_id", "respondent_id", "answers"],
        pool=["submitted_at", "nps", "is_completed", "duration_seconds", "channel", "comment", "language",
              "metadata", "device", "is_anonymous"]),
    "chat_message": dict(
        subtypes=["chat_message", "notification", "sms_message", "email_envelope", "push_notification"],
        core=["message_id", "conversation_id", "sender", "text"],
        pool=["sent_at", "attachments", "reactions", "reply_to_id", "is_edited", "mentions", "read_at",
              "priority", "channel", "metadata", "expires_at"]),
    "bank_statement": dict(
        subtypes=["bank_statement", "account_activity", "card_statement", "wallet_history", "ledger_export"],
        core=["account", "period", "transactions"],
        pool=["opening_balance", "closing_balance", "currency", "generated_at", "statement_id", "total_debits",
              "total_credits", "interest_earned_amount", "notes"]),
}

FAMILY_SUB = {  # family-specific sub-objects and field shapes
    "event_name": lambda r: enum(EVENT_NAMES),
    "viewport": lambda r: {"type": "array", "prefixItems": [integer(320, 7680), integer(240, 4320)],
                           "items": False, "minItems": 2, "description": "Width and height in pixels."},
    "rgb": lambda r: {"type": "array", "prefixItems": [integer(0, 255), integer(0, 255), integer(0, 255)],
                      "items": False, "minItems": 3},
    "passengers": lambda r: array(obj({"first_name": string(1, 40), "last_name": string(1, 40),
                                       "date_of_birth": fmt("date"),
                                       "passport_number": nullable(string(6, 12))},
                                      ["first_name", "last_name"], extra=False), 1, r.choice([2, 3, 4])),
    "flights": lambda r: array(obj({"flight_number": pat("^[A-Z]{2}\\d{1,4}$"), "origin": pat("^[A-Z]{3}$"),
                                    "destination": pat("^[A-Z]{3}$"), "departure_at": fmt("date-time"),
                                    "arrival_at": fmt("date-time"), "cabin": enum(ENUMS["cabin"]),
                                    "seat": nullable(pat("^\\d{1,2}[A-F]$"))},
                                   ["flight_number", "origin", "destination", "departure_at"], extra=False),
                               1, r.choice([2, 3, 4])),
    "booking_reference": lambda r: pat("^[A-Z0-9]{6}$"),
    "booking_status": lambda r: enum(["confirmed", "ticketed", "cancelled", "waitlisted"]),
    "ingredients": lambda r: array(obj({"ingredient_name": string(1, 60), "quantity": number(0),
                                        "unit": enum(["g", "kg", "ml", "l", "cup", "tbsp", "tsp", "piece"])},
                                       ["ingredient_name", "quantity"], extra=False), 1, r.choice([4, 6, 8])),
    "steps": lambda r: array(string(1, 200), 1, r.choice([4, 6])),
    "servings": lambda r: integer(1, 24),
    "answers": lambda r: array(obj({"question_id": string(1, 20),
                                    "answer": {"anyOf": [string(0, 200), integer(0, 10), array(string(1, 40), 0, 4)]}},
                                   extra=False), 1, r.choice([3, 5])),
    "sender": lambda r: obj({"id": string(3, 40), "name": string(1, 80), "role": enum(ENUMS["sender_role"])},
                            ["id", "role"], extra=False),
    "attachments": lambda r: array(obj({"attachment_type": enum(ENUMS["attachment_type"]), "url": string(1, 300),
                                        "size_bytes": integer(0), "mime_type": enum(ENUMS["mime_type"])},
                                       ["attachment_type", "url"], extra=False), 0, 3),
    "mentions": lambda r: array(pat("^@[a-z0-9_]{2,15}$"), 0, 3),
    "account": lambda r: obj({"iban": pat("^[A-Z]{2}\\d{2}[A-Z0-9]{12,30}$"), "account_holder": string(1, 80),
                              "currency": pat("^[A-Z]{3}$")}, extra=False),
    "transactions": lambda r: array(obj({"id": string(4, 40), "date": fmt("date"), "description": string(0, 120),
                                         "amount": number(), "transaction_type": enum(ENUMS["transaction_type"]),
                                         "spending_category": enum(ENUMS["spending_category"]),
                                         "balance_after": number()},
                                        ["id", "date", "amount", "transaction_type"], extra=False),
                                    1, r.choice([4, 6])),
    "database": lambda r: obj({"host": string(1, 255), "port": integer(1, 65535), "name": string(1, 63),
                               "user": string(1, 63), "pool_size": integer(1, 200), "ssl_required": boolean(default=True)},
                              ["host", "port", "name"], extra=False),
    "cache": lambda r: obj({"backend": enum(["memory", "redis", "memcached"]), "ttl_seconds": integer(0, 86400),
                            "max_entries": integer(1)}, ["backend"], extra=False),
    "features": lambda r: {"type": "object", "additionalProperties": boolean(),
                           "description": "Feature flags by name."},
    "retry": lambda r: obj({"max_attempts": integer(0, 10), "backoff_ms": integer(0, 60000),
                            "backoff_strategy": enum(["fixed", "linear", "exponential"])}, ["max_attempts"], extra=False),
    "allowed_origins": lambda r: array(string(1, 200), 0, 4),
    "context": lambda r: string_map(string(0, 120)),
    "level": lambda r: enum(ENUMS["level"]),
    "requirements": lambda r: array(string(1, 80), 1, 5),
    "benefits": lambda r: array(enum(["health insurance", "dental", "401k matching", "remote stipend",
                                      "gym membership", "parental leave", "stock options"]), 0, 4),
    "skills": lambda r: array(string(1, 40), 0, 6),
    "images": lambda r: array(string(1, 300), 0, 3),
    "benefits_list": lambda r: array(string(1, 60), 0, 4),
    "comment": lambda r: nullable(string(0, 300)),
    "subtitle": lambda r: nullable(string(0, 160)),
    "article_status": lambda r: enum(["draft", "in_review", "published", "archived"]),
    "requester": person_schema,
    "author": person_schema,
    "contact": person_schema,
}


def field_schema(name, rng):
    if name in FAMILY_SUB:
        return FAMILY_SUB[name](rng)
    if name in SUB:
        return SUB[name](rng)
    return infer(name, rng)


FIELD_DESCRIPTIONS = {
    "id": "Unique identifier.", "email": "Primary email address.", "created_at": "When the record was created (RFC 3339).",
    "currency": "ISO 4217 currency code.", "country": "ISO 3166-1 alpha-2 country code.", "tags": "Free-form labels.",
    "status": "Lifecycle state.", "price": "Unit price in the given currency.", "total": "Grand total including tax.",
    "timestamp": "Event time in UTC.", "priority": "How urgent the item is.", "notes": "Internal notes, if any.",
}


def describe(name):
    return FIELD_DESCRIPTIONS.get(name, "The " + name.replace("_", " ") + ".")


def compose(rng, family, spec, index):
    subtype = spec["subtypes"][index % len(spec["subtypes"])]
    pool = list(spec["pool"])
    sampled = set(rng.sample(pool, rng.randint(min(4, len(pool)), min(11, len(pool)))))
    chosen = spec["core"] + [f for f in pool if f in sampled]
    props = {}
    for name in chosen:
        props[name] = field_schema(name, rng)
        r = rng.random()
        if r < 0.12:
            props[name] = {**props[name], "description": describe(name)}
        elif r < 0.16 and props[name].get("type") == "string" and "format" not in props[name]:
            hooks = Realistic()
            value = hooks.string(name, props[name], rng)
            if value is not None:
                props[name] = {**props[name], "examples": [value]}
        elif r < 0.2 and props[name].get("type") in ("string", "number", "integer", "boolean") \
                and name not in spec["core"]:
            props[name] = nullable(props[name])
    required = list(spec["core"]) + [n for n in chosen if n not in spec["core"] and rng.random() < 0.35]
    extra = rng.choice([False, False, False, None, True, {"type": "string"}])
    defs = {}
    # Shared sub-schemas as $defs: the addresses and parties.
    shared = {"address": ["address", "shipping_address", "billing_address", "home_address"],
              "party": ["customer", "requester", "author", "contact"]}
    if rng.random() < 0.6:
        for def_name, names in shared.items():
            used = [n for n in names if n in props]
            if used:
                defs[def_name] = SUB[used[0]](rng)
                for n in used:
                    was_nullable = rng.random() < 0.2 and n not in required
                    props[n] = nullable(ref(def_name)) if was_nullable else ref(def_name)
    # Sometimes a oneOf field with pairwise different types.
    if rng.random() < 0.25:
        props["external_ref"] = {"oneOf": [string(1, 40), integer(1), {"type": "null"}],
                                 "description": "An id in the partner system: text, number or null."}
    if rng.random() < 0.15:
        # base entity + specific part: allOf with disjoint properties, no additionalProperties.
        base_names = [n for n in props if n in spec["core"]][:2]
        base = {"type": "object", "properties": {n: props[n] for n in base_names},
                "required": [n for n in base_names if n in required]}
        rest_names = [n for n in props if n not in base_names]
        rest = {"type": "object", "properties": {n: props[n] for n in rest_names},
                "required": [n for n in rest_names if n in required]}
        for b in (base, rest):
            if not b["required"]:
                del b["required"]
        schema = {"type": "object", "allOf": [base, rest]}
    else:
        schema = {"type": "object", "properties": props, "required": required}
        if extra is not None:
            schema["additionalProperties"] = extra
    # API envelope or list, sometimes.
    r = rng.random()
    if r < 0.12:
        defs[subtype] = schema
        schema = obj({"data": array(ref(subtype), 1, rng.choice([2, 3])),
                      "page": integer(1), "per_page": integer(1, 100), "total_count": integer(0),
                      "next_cursor": nullable(string(1, 200))},
                     ["data", "page", "total_count"], extra=False)
    elif r < 0.22:
        schema = obj({"data": schema, "request_id": fmt("uuid"),
                      "warnings": array(string(0, 200), 0, 3)}, ["data"], extra=False)
    return built(subtype, finish(rng, subtype, schema, defs, f"{subtype.replace('_', ' ').capitalize()} payload."),
                 hooks=FAMILY_HOOKS.get(family))


def finish(rng, name, schema, defs, description):
    if defs:
        schema["$defs"] = defs
    head = {}
    if rng.random() < 0.55:
        head["$schema"] = DRAFT
    if rng.random() < 0.2:
        head["$id"] = f"https://schemas.example.com/{name.replace('_', '-')}.json"
    if rng.random() < 0.1:
        head["$comment"] = "Generated for the Tessera structured-output benchmark."
    if rng.random() < 0.6:
        head["title"] = name.replace("_", " ").title().replace(" ", "")
    if rng.random() < 0.5:
        head["description"] = description
    return {**head, **schema}


def built(name, schema, depth=8, hooks=None):
    """A benchmark entry before its instance: name, schema, the instance
    generator's max_depth and realistic-value overrides by property name."""
    return {"name": name, "schema": schema, "max_depth": depth, "hooks": hooks or {}}


def pick(*values):
    return lambda rng: rng.choice(values)


DISHES = ["Lemon Garlic Roast Chicken", "Creamy Tomato Basil Soup", "Black Bean Tacos",
          "Mushroom Risotto", "Blueberry Pancakes", "Thai Green Curry", "Greek Salad", "Banana Bread"]
FAMILY_HOOKS = {
    "recipe": {"name": pick(*DISHES), "description": pick(
        "A weeknight favorite that comes together in under an hour.",
        "Bright, fresh and perfect for a summer lunch.",
        "Comfort food with a crispy top and a soft center.")},
    "product": {"name": product_name, "description": pick(
        "Built to last with a soft-touch finish and a two-year warranty.",
        "Lightweight enough for daily travel and tough enough for the trail.",
        "Handcrafted in small batches from responsibly sourced materials.")},
    "job": {"title": pick(*JOB_TITLES), "description": pick(
        "You will own the roadmap for our billing platform and work closely with finance.",
        "Join a small team that ships customer-facing features every week.",
        "Help our customers get value from day one through onboarding and training.")},
    "app_config": {"appname": pick(*SERVICES), "host": pick("0.0.0.0", "localhost", "api.internal.example.com")},
    "chat_message": {"text": pick(*MESSAGES)},
    "weather": {"stationid": pick("KPDX", "EGLL", "EDDB", "YSSY", "RJOO", "CYVR")},
}
GEO_HOOKS = {"name": pick("Riverside Park", "City Museum of Art", "Blue Bottle Cafe", "Union Station",
                          "Lincoln High School", "Eagle Peak Trailhead"),
             "label": pick("Home", "Office", "Favorite coffee spot", "Gym", "Trailhead parking")}
K8S_HOOKS = {
    "name": pick(*SERVICES), "namespace": pick("production", "staging", "payments", "monitoring"),
    "image": lambda r: f"registry.example.com/{r.choice(SERVICES)}:{r.randint(1, 3)}.{r.randint(0, 20)}.{r.randint(0, 9)}",
    "serviceaccountname": lambda r: r.choice(SERVICES) + "-sa",
    "schedule": pick("*/15 * * * *", "0 3 * * *", "30 2 * * 1", "0 */6 * * *"),
    "host": pick("shop.example.com", "api.example.com", "status.example.org"),
    "hosts": pick("shop.example.com", "api.example.com"),
    "args": pick("--port=8080", "--log-level=info", "--workers=4", "--config=/etc/app/config.yaml"),
    "value": pick("production", "info", "8080", "redis.cache.svc.cluster.local", "true"),
    "ingressclassname": pick("nginx", "traefik"),
}
REC_HOOKS = {
    "category_tree": {"name": pick("Electronics", "Laptops", "Gaming Laptops", "Home & Kitchen", "Cookware",
                                   "Outdoor", "Camping Gear", "Tents", "Books", "Science Fiction", "Audio"),
                      "catalogname": pick("Spring Catalog 2025", "Main Store", "Outlet")},
    "file_system_tree": {"name": pick("src", "docs", "README.md", "main.go", "assets", "logo.png",
                                      "config.yaml", "tests", "report.pdf", "notes.txt")},
    "org_chart": {"company": pick(*COMPANIES)},
    "navigation_menu": {"label": pick("Home", "Products", "Pricing", "About Us", "Blog", "Contact", "Careers",
                                      "Documentation", "Support", "Team"),
                        "iconname": pick("home", "box", "tag", "info", "mail", "book"),
                        "menuname": pick("Main Navigation", "Footer Links", "Account Menu")},
    "bill_of_materials": {"description": pick("Aluminum frame", "M4 hex bolt", "Control board", "Wiring harness",
                                              "LED panel", "Rubber gasket", "Battery pack", "Drive motor"),
                          "assemblyname": pick("E-bike drive unit", "Smart thermostat", "Desk lamp assembly"),
                          "supplier": pick(*COMPANIES)},
    "html_document_tree": {"children": pick("Welcome to our store", "Free shipping on orders over $50",
                                            "Read more", "Contact us", "Our story"),
                           "class": pick("container", "btn btn-primary", "hero", "nav-item"),
                           "href": pick("/about", "/products", "https://www.example.com/blog"),
                           "documenttitle": pick("Harbor Coffee Roasters", "Spring Sale", "About Our Team")},
    "project_task_tree": {"title": pick("Draft launch announcement", "Fix login redirect bug", "Update pricing page",
                                        "Write integration tests", "Migrate database to v15", "Review vendor contract",
                                        "Design onboarding emails"),
                          "project": pick("Website Redesign", "Q3 Product Launch", "Billing Migration")},
    "loan_decision_tree": {"question": pick("Is the credit score above the threshold?",
                                            "Is the debt-to-income ratio acceptable?",
                                            "Has the applicant been employed for over two years?",
                                            "Is the loan amount below the limit?"),
                           "feature": pick("credit_score", "debt_to_income", "employment_years", "loan_amount"),
                           "reason": pick("Strong repayment history.", "Income too low for the requested amount.",
                                          "Thin credit file, needs a closer look."),
                           "modelname": pick("Consumer Loans", "Small Business Credit")},
    "nested_filter_query": {"field": pick("status", "total", "country_code", "created_at", "priority", "plan"),
                            "value": pick("shipped", "US", "enterprise", "high")},
    "document_outline": {"heading": pick("Introduction", "Getting Started", "Installation", "Configuration",
                                         "Troubleshooting", "Appendix", "Security Model", "Release Notes")},
    "region_hierarchy": {"name": pick("United States", "California", "Alameda County", "Oakland", "Germany",
                                      "Bavaria", "Munich", "Canada", "Ontario", "Toronto"),
                         "code": pick("US", "US-CA", "ALA", "OAK", "DE", "DE-BY", "MUC", "CA-ON")},
    "automation_workflow": {"stepname": pick("Fetch order", "Send receipt", "Wait one hour", "Notify finance",
                                             "Manager approval", "Update CRM", "Archive record")},
    "family_tree": {"birthplace": lambda r: r.choice(CITIES)[0], "familyname": pick(*LAST),
                    "fullname": lambda r: " ".join(person(r))},
    "branching_conversation": {"content": pick(*MESSAGES), "title": pick("Trip planning", "Refund question",
                                                                          "Weekend plans")},
    "email_reply_chain": {"subject": pick("Re: Contract renewal", "Re: Q3 budget", "Re: Offsite agenda"),
                          "snippet": pick(*MESSAGES)},
    "hierarchical_config": {"key": pick("server", "http", "timeout_ms", "logging", "level", "database", "pool_size"),
                            "service": pick(*SERVICES)},
    "config_store_entry": {"key": pick("checkout.settings", "search.ranking", "billing.defaults")},
    "math_expression_ast": {"name": pick("monthly_payment", "circle_area", "discounted_price")},
    "comment_thread": {"author": lambda r: " ".join(person(r)), "body": pick(*(REVIEWS + MESSAGES)),
                       "postid": lambda r: "post_%d" % r.randint(1000, 9999)},
    "linked_playlist": {"title": pick("Midnight Drive", "Golden Hour", "Paper Boats", "Northern Lights",
                                      "City of Rain", "Slow Morning"),
                        "artist": pick("The Wandering Keys", "Luna Park", "Maya Reyes", "Static Bloom"),
                        "playlistname": pick("Road Trip", "Focus", "Sunday Morning")},
}
LARGE_HOOKS = {}


# ====================================================================== special families

def geojson(rng, index):
    pos = {"type": "array", "prefixItems": [number(-180, 180, description="Longitude"),
                                            number(-90, 90, description="Latitude")],
           "items": number(description="Altitude in meters") if rng.random() < 0.5 else False,
           "minItems": 2, "maxItems": 3 if rng.random() < 0.5 else 2}
    if pos["items"] is False:
        pos.pop("maxItems")
    defs = {"position": pos}
    point = obj({"type": {"const": "Point"}, "coordinates": ref("position")}, extra=False)
    line = obj({"type": {"const": "LineString"}, "coordinates": array(ref("position"), 2, 4)}, extra=False)
    poly = obj({"type": {"const": "Polygon"}, "coordinates": array(array(ref("position"), 4, 5), 1, 1)}, extra=False)
    geoms = [point, line, poly][:rng.choice([2, 3])]
    defs["geometry"] = {"anyOf": geoms}
    props_schema = obj({"name": string(1, 80), "category": enum(["park", "museum", "cafe", "station", "school", "trailhead"]),
                        "population": nullable(integer(0)), "opened_date": fmt("date"),
                        "rating": number(0, 5), "tags": array(string(1, 24), 0, 3)},
                       ["name"], extra=rng.choice([False, True]))
    feature = obj({"type": {"const": "Feature"}, "id": {"oneOf": [string(1, 40), integer(0)]},
                   "geometry": nullable(ref("geometry")), "properties": nullable(props_schema)},
                  ["type", "geometry", "properties"], extra=False)
    kind = index % 3
    if kind == 0:
        schema, name = feature, "geojson_feature"
    elif kind == 1:
        defs["feature"] = feature
        schema = obj({"type": {"const": "FeatureCollection"}, "features": array(ref("feature"), 1, rng.choice([2, 3])),
                      "bbox": {"type": "array", "prefixItems": [number(-180, 180), number(-90, 90), number(-180, 180),
                                                                  number(-90, 90)], "items": False, "minItems": 4}},
                     ["type", "features"], extra=False)
        name = "geojson_feature_collection"
    else:
        schema = obj({"place_id": fmt("uuid"), "label": string(1, 80), "location": ref("geometry"),
                      "updated_at": fmt("date-time"), "visibility": enum(ENUMS["visibility"])},
                     ["place_id", "location"], extra=False)
        name = "map_place"
    return built(name, finish(rng, name, schema, defs, "A GeoJSON-like geographic object."), hooks=GEO_HOOKS)


def k8s(rng, index):
    """Kubernetes-like manifests (camelCase names as in real manifests)."""
    name_pat = pat("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    metadata = obj({"name": name_pat, "namespace": string(1, 63), "labels": string_map(string(0, 63)),
                    "annotations": string_map(string(0, 200)), "uid": fmt("uuid"),
                    "creationTimestamp": fmt("date-time")},
                   ["name"], extra=False)
    container = obj({
        "name": name_pat, "image": string(1, 200),
        "imagePullPolicy": enum(["Always", "IfNotPresent", "Never"]),
        "ports": array(obj({"containerPort": integer(1, 65535), "protocol": enum(ENUMS["protocol"], default="TCP"),
                            "name": nullable(string(1, 15))}, ["containerPort"], extra=False), 0, 3),
        "env": array(obj({"name": pat("^[A-Z_][A-Z0-9_]*$"), "value": string(0, 200)}, extra=False), 0, 4),
        "resources": obj({"limits": obj({"cpu": pat("^\\d+m$"), "memory": pat("^\\d+(Mi|Gi)$")}, [], extra=False),
                          "requests": obj({"cpu": pat("^\\d+m$"), "memory": pat("^\\d+(Mi|Gi)$")}, [], extra=False)},
                         [], extra=False),
        "args": array(string(0, 100), 0, 4),
    }, ["name", "image"], extra=False)
    defs = {"metadata": metadata, "container": container}
    kind = ["Deployment", "Service", "ConfigMap", "CronJob", "Ingress"][index % 5]
    api = {"Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1", "CronJob": "batch/v1",
           "Ingress": "networking.k8s.io/v1"}[kind]
    if kind == "Deployment":
        spec = obj({"replicas": integer(0, 50, default=1),
                    "selector": obj({"matchLabels": string_map(string(1, 63))}, extra=False),
                    "strategy": obj({"type": enum(["RollingUpdate", "Recreate"])}, extra=False),
                    "template": obj({"metadata": ref("metadata"),
                                     "spec": obj({"containers": array(ref("container"), 1, 2),
                                                  "serviceAccountName": string(1, 63),
                                                  "restartPolicy": enum(["Always", "OnFailure", "Never"])},
                                                 ["containers"], extra=False)}, extra=False)},
                   ["selector", "template"], extra=False)
    elif kind == "Service":
        del defs["container"]
        spec = obj({"type": enum(["ClusterIP", "NodePort", "LoadBalancer"]), "selector": string_map(string(1, 63)),
                    "ports": array(obj({"port": integer(1, 65535),
                                        "targetPort": {"oneOf": [integer(1, 65535), string(1, 15)]},
                                        "protocol": enum(ENUMS["protocol"])}, ["port"], extra=False), 1, 3),
                    "sessionAffinity": enum(["None", "ClientIP"])}, ["ports"], extra=False)
    elif kind == "ConfigMap":
        del defs["container"]
        spec = None
    elif kind == "CronJob":
        spec = obj({"schedule": string(9, 40, examples=["*/15 * * * *"]), "suspend": boolean(default=False),
                    "concurrencyPolicy": enum(["Allow", "Forbid", "Replace"]),
                    "successfulJobsHistoryLimit": integer(0, 10),
                    "jobTemplate": obj({"containers": array(ref("container"), 1, 1),
                                        "backoffLimit": integer(0, 10)}, ["containers"], extra=False)},
                   ["schedule", "jobTemplate"], extra=False)
        del defs["metadata"]["properties"]["annotations"]
    else:
        del defs["container"]
        spec = obj({"ingressClassName": string(1, 63),
                    "rules": array(obj({"host": string(1, 253), "paths": array(obj({
                        "path": pat("^/[a-z0-9/_-]*$"), "pathType": enum(["Prefix", "Exact"]),
                        "serviceName": name_pat, "servicePort": integer(1, 65535)}, extra=False), 1, 3)},
                        extra=False), 1, 2),
                    "tls": array(obj({"hosts": array(string(1, 253), 1, 2), "secretName": name_pat},
                                     extra=False), 0, 1)}, ["rules"], extra=False)
    props = {"apiVersion": {"const": api}, "kind": {"const": kind}, "metadata": ref("metadata")}
    if spec is None:
        props["data"] = string_map(string(0, 200))
        props["immutable"] = boolean()
    else:
        props["spec"] = spec
    schema = obj(props, ["apiVersion", "kind", "metadata"] + (["spec"] if spec else ["data"]), extra=False)
    name = "k8s_" + kind.lower()
    return built(name, finish(rng, name, schema, defs, f"A Kubernetes-like {kind} manifest."), hooks=K8S_HOOKS)


TOOLS = [
    ("get_weather_forecast", "Get the weather forecast for a place.", lambda r: obj({
        "location": obj({"city": string(1, 80), "country": pat("^[A-Z]{2}$"), "latitude": number(-90, 90),
                         "longitude": number(-180, 180)}, ["city"], extra=False),
        "unit": enum(ENUMS["unit"], default="celsius"), "days": integer(1, 14, default=3),
        "include": array(enum(["hourly", "alerts", "air_quality", "sunrise_sunset"]), 0, 4),
        "language": pat("^[a-z]{2}$")}, ["location", "unit", "days", "include"])),
    ("search_flights", "Search for flights between two airports.", lambda r: obj({
        "origin": pat("^[A-Z]{3}$", description="IATA airport code"), "destination": pat("^[A-Z]{3}$"),
        "departure_date": fmt("date"), "return_date": nullable(fmt("date")),
        "passengers": obj({"adults": integer(1, 9), "children": integer(0, 8), "infants": integer(0, 4)}, ["adults"], extra=False),
        "cabin": enum(ENUMS["cabin"]), "max_stops": integer(0, 3), "preferred_airlines": array(enum(AIRLINES), 0, 3),
        "max_price": obj({"amount": number(0), "currency": pat("^[A-Z]{3}$")}, extra=False)},
        ["origin", "destination", "departure_date", "passengers", "cabin"])),
    ("send_email", "Send an email on the user's behalf.", lambda r: obj({
        "to": array(fmt("email"), 1, 5), "cc": array(fmt("email"), 0, 3), "subject": string(1, 150),
        "body": string(1, 2000), "importance": enum(["low", "normal", "high"], default="normal"),
        "attachments": array(obj({"filename": string(1, 120), "mime_type": enum(ENUMS["mime_type"])}, extra=False), 0, 2),
        "send_at": nullable(fmt("date-time"))}, ["to", "subject", "body"])),
    ("create_calendar_event", "Create an event in the user's calendar.", lambda r: obj({
        "title": string(1, 120), "start": fmt("date-time"), "end": fmt("date-time"),
        "attendees": array(fmt("email"), 0, 6), "location": nullable(string(1, 120)),
        "description": string(0, 500), "reminder_minutes": array(integer(0, 10080), 0, 2),
        "recurrence": nullable(enum(ENUMS["recurrence"])), "conference": boolean(default=False)},
        ["title", "start", "end", "attendees"])),
    ("query_database", "Run a structured query against the analytics warehouse.", lambda r: obj({
        "table": enum(["orders", "customers", "products", "sessions", "invoices"]),
        "columns": array(pat("^[a-z][a-z0-9_]*$"), 1, 6),
        "filters": array(obj({"column": pat("^[a-z][a-z0-9_]*$"),
                              "operator": enum(["eq", "ne", "gt", "gte", "lt", "lte", "in", "like"]),
                              "value": {"anyOf": [string(0, 100), number(), array({"type": ["string", "number"]}, 1, 4)]}},
                             extra=False), 0, 4),
        "order_by": obj({"column": pat("^[a-z][a-z0-9_]*$"), "direction": enum(ENUMS["sort_order"])}, extra=False),
        "limit": integer(1, 1000, default=100)}, ["table", "columns", "filters", "limit"])),
    ("book_restaurant", "Reserve a table at a restaurant.", lambda r: obj({
        "restaurant_name": string(1, 120), "city": string(1, 80), "date": fmt("date"), "time": fmt("time"),
        "party_size": integer(1, 20), "seating": enum(["indoor", "outdoor", "bar", "no_preference"]),
        "dietary_requirements": array(enum(["vegetarian", "vegan", "gluten_free", "nut_allergy", "halal", "kosher"]), 0, 3),
        "contact": obj({"name": string(1, 80), "phone": string(7, 20), "email": fmt("email")}, ["name", "phone"], extra=False),
        "special_requests_notes": nullable(string(0, 300))}, ["restaurant_name", "date", "time", "party_size", "contact"])),
    ("create_issue", "Open an issue in a code repository.", lambda r: obj({
        "repository": pat("^[a-z0-9-]+/[a-z0-9-]+$"), "title": string(1, 200), "body": string(0, 4000),
        "labels": array(enum(["bug", "enhancement", "documentation", "good first issue", "performance", "security"]), 0, 3),
        "assignees": array(pat("^@[a-z0-9_]{2,15}$"), 0, 2), "priority": enum(ENUMS["priority"]),
        "milestone": nullable(string(1, 60))}, ["repository", "title", "body", "labels"])),
    ("convert_currency", "Convert amounts between currencies.", lambda r: obj({
        "conversions": array(obj({"amount": number(0), "from_currency": pat("^[A-Z]{3}$"),
                                  "to_currency": pat("^[A-Z]{3}$")}, extra=False), 1, 4),
        "rate_date": nullable(fmt("date")), "round_to_cents": boolean(default=True),
        "provider": enum(["ecb", "fed", "market_mid"])}, ["conversions", "provider"])),
    ("search_products", "Search the product catalog.", lambda r: obj({
        "query": string(1, 200), "category": enum(ENUMS["category"]),
        "price_range": obj({"min_price": number(0), "max_price": number(0)}, extra=False),
        "brands": array(string(1, 40), 0, 3), "in_stock_only": boolean(default=True),
        "sort_by": enum(["relevance", "price_low_to_high", "price_high_to_low", "rating", "newest"]),
        "page": integer(1, 100), "per_page": integer(1, 100)}, ["query", "sort_by", "page", "per_page", "price_range"])),
    ("schedule_maintenance", "Schedule a maintenance window for servers.", lambda r: obj({
        "hosts": array(string(1, 253), 1, 4), "window": obj({"start": fmt("date-time"), "duration_minutes": integer(15, 720)}, extra=False),
        "maintenance_type": enum(["patching", "reboot", "hardware_swap", "database_upgrade"]),
        "notify": array(fmt("email"), 0, 3), "change_ticket_id": pat("^TCK-\\d{5}$"),
        "rollback_plan": string(0, 500), "requires_downtime": boolean()},
        ["hosts", "window", "maintenance_type", "change_ticket_id", "rollback_plan"])),
]


def tool(rng, index):
    name, description, build = TOOLS[index % len(TOOLS)]
    params = build(rng)
    params["description"] = description
    if rng.random() < 0.5:
        params["title"] = name
    # OpenAPI-like tool call: {"name": const, "arguments": parameters}
    if index >= len(TOOLS):
        schema = obj({"tool_name": {"const": name}, "arguments": params, "call_id": fmt("uuid")},
                     ["tool_name", "arguments"], extra=False)
        return built(name + "_call", finish(rng, name + "_call", schema, {}, "A function call with its arguments."))
    return built(name + "_parameters", finish(rng, name + "_parameters", params, {}, description))


# ====================================================================== large

def large(rng, index):
    """50-150 properties, objects nested 5-7 deep; a section named "x[]"
    is an array of such objects."""
    name, sections = LARGE_THEMES[index % len(LARGE_THEMES)]
    defs = {}

    def build(sec):
        sec_name, fields, subs = sec
        sampled = set(rng.sample(fields, max(3, round(len(fields) * rng.uniform(0.75, 1.0)))))
        picked = [f for f in fields if f in sampled]
        props = {f: field_schema(f, rng) for f in picked}
        req = [f for f in picked if rng.random() < 0.15][:3] or [picked[0]]
        for sub in subs:
            key = sub[0].rstrip("[]")
            props[key] = build(sub)
            if sub[0].endswith("[]"):
                props[key] = array(props[key], 0, rng.choice([2, 3]))
            if rng.random() < 0.45:
                req.append(key)
        return obj(props, req, extra=rng.choice([False, False, False, None]))

    props = {sec[0].rstrip("[]"): build(sec) for sec in sections}
    for sec in sections:
        if sec[0].endswith("[]"):
            key = sec[0].rstrip("[]")
            props[key] = array(props[key], 0, 2)
    if rng.random() < 0.5:
        defs["audit"] = obj({"created_at": fmt("date-time"), "created_by": string(1, 80),
                             "updated_at": fmt("date-time"), "updated_by": string(1, 80),
                             "revision": integer(1)}, ["created_at"], extra=False)
        props["audit"] = ref("audit")
    schema = obj(props, [sec[0].rstrip("[]") for sec in sections[:2]], extra=False)
    title = f"large_{name}"
    return built(title, finish(rng, title, schema, defs, f"A large {name.replace('_', ' ')} document."),
                 depth=14, hooks=LARGE_HOOKS)


def section(name, fields, *subs):
    return (name, fields.split(), list(subs))


LARGE_THEMES = [
    ("tenant_settings", [
        section("organization", "organization_name display_name billing_email country_code timezone locale plan "
                "seats_count created_at is_verified industry_type website_url support_email max_projects_count",
                section("branding", "color_hex logo_url favicon_url custom_domain_name show_powered_by",
                        section("email_theme", "header_color_hex footer_text button_label use_dark_mode",
                                section("fonts", "heading_font_name body_font_name base_size_count",
                                        section("fallback", "font_name is_system_font line_height_percent",
                                                section("license", "license_name is_open_source renewal_date")))))),
        section("security", "require_two_factor session_timeout_minutes password_min_length_count allow_sso "
                "sso_provider_name ip_allowlist_enabled audit_retention_days max_login_attempts",
                section("password_policy", "require_uppercase require_numbers require_symbols expiry_days history_count"),
                section("sso", "entity_id_url metadata_url default_role is_enforced certificate_expires_at",
                        section("attribute_mapping", "email_attribute_name first_name_attribute_name "
                                "last_name_attribute_name groups_attribute_name"))),
        section("notifications", "send_weekly_digest send_billing_alerts digest_frequency quiet_hours_enabled",
                section("channels", "email_enabled sms_enabled slack_enabled webhook_url slack_channel_name",
                        section("escalation", "escalation_level delay_minutes notify_owner_enabled on_call_email",
                                section("schedule", "day_of_week start_time end_time timezone")))),
        section("limits", "max_api_requests_per_minute max_storage_size_mb max_members_count max_webhooks_count "
                "rate_limit_policy burst_allowed"),
        section("billing", "billing_cycle currency tax_id_text invoice_email auto_renew_enabled next_invoice_date "
                "credit_balance_amount",
                section("billing_address", "street city state postal_code country_code")),
    ]),
    ("patient_record", [
        section("patient", "patient_id first_name last_name date_of_birth gender blood_type phone email "
                "preferred_language_name primary_care_physician_name is_organ_donor",
                section("home_address", "street city state postal_code country_code"),
                section("emergency_contacts[]", "contact_name relationship_type phone email is_legal_guardian")),
        section("insurance", "provider_name policy_number_id group_number_id coverage_type effective_date expiry_date "
                "copay_amount deductible_amount is_primary",
                section("subscriber", "subscriber_name date_of_birth relationship_type employer_name",
                        section("employer_address", "street city state postal_code country_code"))),
        section("clinical", "height_cm weight_kg allergy_tags chronic_condition_tags is_smoker last_visit_date",
                section("vitals", "measured_at heart_rate_count systolic_count diastolic_count temperature_c "
                        "oxygen_percent",
                        section("device", "device_id device_type calibrated_at firmware_version_name",
                                section("manufacturer", "manufacturer_name support_phone model_name",
                                        section("certification", "certification_name issued_date expiry_date "
                                                "is_fda_approved")))),
                section("medications_summary", "active_count last_reviewed_date reviewer_name review_required")),
        section("consent", "treatment_consent_verified data_sharing_allowed research_opt_in signed_at "
                "signature_name"),
        section("billing", "account_number_id balance_amount currency last_payment_date payment_plan_enabled"),
    ]),
    ("vehicle_listing", [
        section("vehicle", "vin_id make_name model_name year trim_name body_type fuel_type transmission "
                "mileage_km exterior_color_name interior_color_name doors_count seats_count condition",
                section("engine", "displacement_cm power_kw torque_nm cylinders_count turbo_enabled emission_level",
                        section("electric", "battery_capacity_count range_km charging_time_minutes "
                                "fast_charge_enabled",
                                section("charging_port", "connector_type max_power_kw has_adapter",
                                        section("adapter", "adapter_name is_included price")))),
                section("features", "has_navigation has_sunroof has_heated_seats has_backup_camera "
                        "has_adaptive_cruise has_lane_assist has_apple_carplay has_android_auto"),
                section("tires", "tire_brand_name tire_size_name tread_depth_mm last_rotation_date")),
        section("listing", "listing_id price currency is_negotiable listed_at expires_at view_count "
                "listing_status description",
                section("seller", "seller_name seller_type phone email is_verified rating",
                        section("dealership", "dealership_name street city postal_code country_code "
                                "opening_hours_text"))),
        section("history", "previous_owners_count accident_count service_records_count last_service_date "
                "has_clean_title import_country_code"),
        section("financing", "is_available apr_percent term_months down_payment_amount monthly_payment_amount "
                "lender_name"),
    ]),
    ("employee_file", [
        section("employee", "employee_id first_name last_name email phone job_title department hire_date "
                "employment_type manager_email work_location_name is_remote",
                section("compensation", "base_salary_amount currency pay_frequency_type bonus_target_percent "
                        "equity_units_count next_review_date",
                        section("bank_details", "bank_name account_holder_name iban_text is_verified",
                                section("bank_address", "street city postal_code country_code",
                                        section("contact", "contact_name phone email")))),
                section("home_address", "street city state postal_code country_code")),
        section("time_off", "vacation_days sick_days personal_days carryover_days accrual_policy",
                section("current_request", "start_date end_date request_type request_status approver_email "
                        "submitted_at")),
        section("it_access", "laptop_serial_id has_vpn_access github_username_text slack_user_id "
                "access_level badge_id provisioned_at",
                section("accounts", "google_workspace_enabled jira_enabled salesforce_enabled aws_enabled "
                        "okta_user_id")),
        section("performance", "last_rating_level goals_count completed_goals_count promotion_eligible "
                "review_cycle_name",
                section("goals[]", "goal_title progress_percent due_date is_stretch_goal")),
        section("emergency_contact", "contact_name relationship_type phone email"),
    ]),
    ("ci_pipeline", [
        section("pipeline", "pipeline_name repository_url default_branch_name trigger_type timeout_minutes "
                "max_parallel_jobs_count is_enabled created_at",
                section("cache", "cache_enabled cache_key_name ttl_days max_size_mb restore_strategy"),
                section("notifications", "send_on_failure send_on_success slack_channel_name email",
                        section("escalation", "escalation_level delay_minutes on_call_email",
                                section("pager", "pager_service_name routing_key_text severity_level",
                                        section("hours", "day_of_week start_time end_time"))))),
        section("build", "build_image_name build_command_text working_directory_name cpu_level memory_size_mb "
                "use_docker_cache max_retries",
                section("artifacts", "artifact_name artifact_path_text retention_days compress_enabled",
                        section("upload", "bucket_name region storage_policy public_read_allowed")),
                section("test", "test_command_text coverage_threshold_percent fail_fast_enabled parallel_count")),
        section("deploy", "target_environment_name strategy_type approval_required approver_email "
                "rollback_enabled health_check_url canary_percent",
                section("secrets", "vault_path_text rotate_enabled rotation_days")),
        section("schedule", "cron_text timezone is_paused next_run_at"),
    ]),
    ("real_estate_listing", [
        section("property", "property_id property_type bedrooms_count bathrooms_count area_count lot_size_count "
                "year_built floors_count has_garage has_pool has_garden is_furnished energy_rating_level",
                section("address", "street city state postal_code country_code latitude longitude"),
                section("amenities", "has_air_conditioning has_elevator has_balcony has_fireplace "
                        "has_dishwasher pets_allowed parking_spaces_count"),
                section("rooms[]", "room_name area_count floor_count has_window")),
        section("listing", "listing_id price currency listed_at listing_status is_auction "
                "open_house_date description virtual_tour_url",
                section("agent", "agent_name agency_name phone email license_number_id rating",
                        section("office", "office_name street city postal_code phone",
                                section("manager", "manager_name email phone",
                                        section("assistant", "assistant_name email phone"))))),
        section("costs", "monthly_hoa_fee annual_tax_amount insurance_estimate_amount utilities_estimate_amount"),
        section("school_district", "district_name elementary_school_name middle_school_name high_school_name "
                "rating"),
    ]),
    ("insurance_policy", [
        section("policy", "policy_number_id product_name effective_date expiry_date premium_amount currency "
                "billing_cycle is_active auto_renew_enabled issued_at",
                section("holder", "first_name last_name date_of_birth email phone",
                        section("address", "street city state postal_code country_code",
                                section("geo", "latitude longitude flood_zone_name",
                                        section("risk", "risk_score wildfire_level flood_level earthquake_level",
                                        section("model", "model_name version scored_at"))))),
                section("beneficiaries[]", "full_name relationship_type share_percent")),
        section("coverage", "liability_limit_amount deductible_amount includes_roadside includes_rental "
                "glass_coverage_enabled coverage_type",
                section("vehicle", "vin_id make_name model_name year annual_mileage_km is_garaged")),
        section("claims_summary", "open_claims_count closed_claims_count last_claim_date total_paid_amount"),
        section("agent", "agent_name agency_name email phone license_number_id"),
    ]),
    ("game_save_state", [
        section("player", "player_id display_name character_level_count experience_points_count gold_amount last_played_at "
                "play_time_minutes difficulty",
                section("stats", "strength_count agility_count intellect_count stamina_count luck_count "
                        "health_count mana_count",
                        section("modifiers", "strength_bonus_count agility_bonus_count is_blessed "
                                "curse_name",
                                section("source", "source_name expires_at is_permanent"))),
                section("equipment", "weapon_name armor_name helmet_name boots_name ring_name amulet_name",
                        section("weapon_stats", "damage_count speed_percent durability_percent is_enchanted"))),
        section("world", "region_name weather_type time_of_day_name day_count",
                section("position", "x_count y_count z_count map_name")),
        section("quests[]", "quest_name quest_status progress_percent is_main_quest"),
        section("settings", "music_volume_percent effects_volume_percent subtitles_enabled language "
                "show_tutorials invert_y_axis"),
    ]),
]


# ====================================================================== recursive

def recursive(rng, index):
    builders = [
        rec_category_tree, rec_file_system, rec_org_chart, rec_comment_thread, rec_linked_playlist,
        rec_json_value, rec_expression, rec_menu, rec_bill_of_materials, rec_dom_node,
        rec_task_tree, rec_decision_tree, rec_filter_query, rec_outline_root, rec_region_hierarchy,
        rec_workflow, rec_family_tree, rec_chat_tree, rec_mail_thread_root, rec_config_tree,
    ]
    return builders[index % len(builders)](rng)


def rec_category_tree(rng):
    defs = {"category": obj({"id": integer(1), "name": string(1, 60), "slug": pat("^[a-z0-9]+(-[a-z0-9]+)*$"),
                             "product_count": integer(0),
                             "subcategories": array(ref("category"), 0, 3)}, ["id", "name", "subcategories"], extra=False)}
    schema = obj({"catalog_name": string(1, 80), "updated_at": fmt("date-time"),
                  "root_categories": array(ref("category"), 1, 3)}, extra=False)
    return built("category_tree", finish(rng, "category_tree", schema, defs, "A product category hierarchy."), 11)


def rec_file_system(rng):
    defs = {
        "file": obj({"kind": {"const": "file"}, "name": string(1, 255), "size_bytes": integer(0),
                     "mime_type": enum(ENUMS["mime_type"]), "modified_at": fmt("date-time")},
                    ["kind", "name", "size_bytes"], extra=False),
        "directory": obj({"kind": {"const": "directory"}, "name": string(1, 255),
                          "entries": array({"anyOf": [ref("file"), ref("directory")]}, 0, 4)},
                         ["kind", "name", "entries"], extra=False),
    }
    schema = {"$ref": "#/$defs/directory"}
    return built("file_system_tree", finish(rng, "file_system_tree", schema, defs, "A directory tree."), 11)


def rec_org_chart(rng):
    defs = {"employee": obj({"name": string(1, 80), "job_title": string(1, 80), "email": fmt("email"),
                             "department": enum(DEPARTMENTS),
                             "reports": array(ref("employee"), 0, 3)}, ["name", "job_title"], extra=False)}
    schema = obj({"company": string(1, 80), "as_of": fmt("date"), "ceo": ref("employee")}, extra=False)
    return built("org_chart", finish(rng, "org_chart", schema, defs, "Who reports to whom."), 11)


def rec_comment_thread(rng):
    defs = {"comment": obj({"id": fmt("uuid"), "author": string(1, 80), "body": string(1, 500),
                            "posted_at": fmt("date-time"), "likes_count": integer(0),
                            "is_edited": boolean(), "replies": array(ref("comment"), 0, 3)},
                           ["id", "author", "body", "replies"], extra=False)}
    schema = obj({"post_id": string(1, 40), "comment_count": integer(0),
                  "comments": array(ref("comment"), 1, 3)}, extra=False)
    return built("comment_thread", finish(rng, "comment_thread", schema, defs, "A discussion with nested replies."), 11)


def rec_linked_playlist(rng):
    defs = {"track": obj({"title": string(1, 120), "artist": string(1, 80), "duration_seconds": integer(1, 3600),
                          "explicit": boolean(),
                          "next": {"anyOf": [ref("track"), {"type": "null"}]}},
                         ["title", "artist", "next"], extra=False)}
    schema = obj({"playlist_name": string(1, 80), "owner": string(1, 80), "first_track": ref("track")}, extra=False)
    return built("linked_playlist", finish(rng, "linked_playlist", schema, defs, "A playlist as a linked list."), 17)


def rec_json_value(rng):
    defs = {"json": {"type": ["string", "number", "boolean", "null", "array", "object"],
                     "maxLength": 80, "items": ref("json"), "maxItems": 4,
                     "additionalProperties": ref("json"),
                     "description": "Any JSON value, nested at will."}}
    schema = obj({"key": string(1, 60), "value": ref("json"), "updated_at": fmt("date-time"),
                  "version": integer(1)}, ["key", "value"], extra=False)
    return built("config_store_entry", finish(rng, "config_store_entry", schema, defs, "A key with an arbitrary JSON value."), 11)


def rec_expression(rng):
    defs = {
        "expr": {"anyOf": [number(description="A literal."), ref("binary"), ref("call")]},
        "binary": obj({"op": enum(["+", "-", "*", "/", "^"]), "left": ref("expr"), "right": ref("expr")}, extra=False),
        "call": obj({"function": enum(["sqrt", "abs", "max", "min", "round"]),
                     "args": array(ref("expr"), 1, 3)}, extra=False),
    }
    schema = obj({"name": string(1, 60), "expression": ref("expr"), "precision": integer(0, 10)},
                 ["name", "expression"], extra=False)
    return built("math_expression_ast", finish(rng, "math_expression_ast", schema, defs, "An arithmetic expression tree."), 11)


def rec_menu(rng):
    defs = {"menu_item": obj({"label": string(1, 60), "url": nullable(string(1, 200)),
                              "icon_name": nullable(string(1, 40)), "is_visible": boolean(default=True),
                              "children": array(ref("menu_item"), 0, 4)}, ["label"], extra=False)}
    schema = obj({"menu_name": string(1, 60), "items": array(ref("menu_item"), 1, 4)}, extra=False)
    return built("navigation_menu", finish(rng, "navigation_menu", schema, defs, "A site navigation menu."), 8)


def rec_bill_of_materials(rng):
    defs = {"component": obj({"part_number": pat("^[A-Z]{3}-\\d{4}$"), "description": string(1, 120),
                              "quantity": integer(1, 500), "unit_cost": number(0),
                              "supplier": nullable(string(1, 80)),
                              "subcomponents": array(ref("component"), 0, 3)},
                             ["part_number", "quantity"], extra=False)}
    schema = obj({"assembly_name": string(1, 80), "revision": pat("^\\d+\\.\\d+\\.\\d+$"),
                  "top_level": ref("component")}, extra=False)
    return built("bill_of_materials", finish(rng, "bill_of_materials", schema, defs, "A product assembly with nested parts."), 11)


def rec_dom_node(rng):
    defs = {"element": obj({"tag": enum(["div", "section", "p", "span", "ul", "li", "a", "h2", "img"]),
                            "attributes": string_map(string(0, 100)),
                            "children": array({"anyOf": [string(0, 120), ref("element")]}, 0, 4)},
                           ["tag", "children"], extra=False)}
    schema = obj({"document_title": string(1, 120), "body": ref("element")}, extra=False)
    return built("html_document_tree", finish(rng, "html_document_tree", schema, defs, "A simplified DOM tree."), 11)


def rec_task_tree(rng):
    defs = {"task": obj({"id": integer(1), "title": string(1, 120), "status": enum(["todo", "in_progress", "blocked", "done"]),
                         "assignee": nullable(string(1, 80)), "due_date": nullable(fmt("date")),
                         "estimate_hours": number(0, 1000),
                         "subtasks": array(ref("task"), 0, 3)}, ["id", "title", "status"], extra=False)}
    schema = obj({"project": string(1, 80), "tasks": array(ref("task"), 1, 3)}, extra=False)
    return built("project_task_tree", finish(rng, "project_task_tree", schema, defs, "Tasks with nested subtasks."), 11)


def rec_decision_tree(rng):
    defs = {
        "outcome": obj({"decision": enum(["approve", "reject", "manual_review"]), "reason": string(1, 200)}, extra=False),
        "question": obj({"question": string(1, 200), "feature": pat("^[a-z][a-z0-9_]*$"), "threshold": number(),
                         "if_true": {"anyOf": [ref("outcome"), ref("question")]},
                         "if_false": {"anyOf": [ref("outcome"), ref("question")]}}, extra=False),
    }
    schema = obj({"model_name": string(1, 80), "version": pat("^\\d+\\.\\d+\\.\\d+$"), "root": ref("question")}, extra=False)
    return built("loan_decision_tree", finish(rng, "loan_decision_tree", schema, defs, "A decision tree for loan screening."), 11)


def rec_filter_query(rng):
    defs = {
        "condition": obj({"field": pat("^[a-z][a-z0-9_]*$"), "operator": enum(["eq", "ne", "gt", "lt", "contains"]),
                          "value": {"type": ["string", "number", "boolean"]}}, extra=False),
        "filter": {"anyOf": [ref("condition"),
                             obj({"all_of": array(ref("filter"), 1, 3)}, extra=False),
                             obj({"any_of": array(ref("filter"), 1, 3)}, extra=False)]},
    }
    schema = obj({"collection": enum(["orders", "customers", "tickets", "products"]), "where": ref("filter"),
                  "limit": integer(1, 500)}, ["collection", "where"], extra=False)
    return built("nested_filter_query", finish(rng, "nested_filter_query", schema, defs, "A boolean filter over records."), 11)


def rec_outline_root(rng):
    # "#": every section is the whole schema again.
    schema = obj({"heading": string(1, 120), "summary": string(0, 300), "page": integer(1, 999),
                  "sections": array({"$ref": "#"}, 0, 3)}, ["heading", "sections"], extra=False)
    return built("document_outline", finish(rng, "document_outline", schema, {}, "A table of contents; sections nest."), 11)


def rec_region_hierarchy(rng):
    defs = {"region": obj({"code": string(2, 10), "name": string(1, 80), "population": integer(0),
                           "region_type": enum(["country", "state", "county", "city", "district"]),
                           "subregions": array(ref("region"), 0, 3)}, ["code", "name", "region_type"], extra=False)}
    schema = ref("region")
    return built("region_hierarchy", finish(rng, "region_hierarchy", schema, defs, "Administrative regions."), 11)


def rec_workflow(rng):
    defs = {"step": obj({"step_name": string(1, 80), "action": enum(["http_request", "send_email", "wait", "transform", "approve"]),
                         "timeout_seconds": integer(1, 86400), "retries": integer(0, 5),
                         "on_success": ref("step"), "on_failure": ref("step")}, ["step_name", "action"], extra=False)}
    schema = obj({"workflow_id": fmt("uuid"), "name": string(1, 80), "trigger": enum(["manual", "schedule", "webhook"]),
                  "start": ref("step")}, extra=False)
    return built("automation_workflow", finish(rng, "automation_workflow", schema, defs, "Steps that branch on success and failure."), 14)


def rec_family_tree(rng):
    defs = {"person": obj({"full_name": string(1, 80), "birth_year": integer(1800, 2025),
                           "death_year": nullable(integer(1800, 2025)), "birthplace": nullable(string(1, 80)),
                           "children": array(ref("person"), 0, 3)}, ["full_name", "birth_year"], extra=False)}
    schema = obj({"family_name": string(1, 60), "ancestor": ref("person"), "compiled_by": fmt("email")}, extra=False)
    return built("family_tree", finish(rng, "family_tree", schema, defs, "Descendants of one ancestor."), 11)


def rec_chat_tree(rng):
    defs = {"turn": obj({"role": enum(ENUMS["sender_role"]), "content": string(1, 600),
                         "created_at": fmt("date-time"),
                         "alternatives": array(ref("turn"), 0, 2)}, ["role", "content"], extra=False)}
    schema = obj({"conversation_id": fmt("uuid"), "title": string(1, 120),
                  "turns": array(ref("turn"), 1, 4)}, ["conversation_id", "turns"], extra=False)
    return built("branching_conversation", finish(rng, "branching_conversation", schema, defs, "A conversation with alternative turns."), 8)


def rec_mail_thread_root(rng):
    schema = obj({"message_id": fmt("uuid"), "from": fmt("email"), "subject": string(1, 200),
                  "sent_at": fmt("date-time"), "snippet": string(0, 200),
                  "in_reply_to": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                 ["message_id", "from", "subject", "in_reply_to"], extra=False)
    return built("email_reply_chain", finish(rng, "email_reply_chain", schema, {}, "An email and the chain it replies to."), 14)


def rec_config_tree(rng):
    defs = {"node": obj({"key": pat("^[a-z][a-z0-9_]*$"), "description": string(0, 200),
                         "value": {"type": ["string", "integer", "boolean", "null"], "maxLength": 100},
                         "children": array(ref("node"), 0, 4)}, ["key"], extra=False)}
    schema = obj({"service": string(1, 60), "environment": enum(ENUMS["environment"]),
                  "root": ref("node")}, extra=False)
    return built("hierarchical_config", finish(rng, "hierarchical_config", schema, defs, "Settings as a tree of keys."), 11)


# ====================================================================== driver

_PRETOKEN = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\s+")


def estimate_tokens(value):
    """A BPE-like token count of json.dumps(value): one token per short
    word / 1-3 digits, long words and punctuation runs split."""
    text = json.dumps(value, ensure_ascii=False)
    total = 0
    for piece in _PRETOKEN.findall(text):
        core = piece.strip()
        if not core:
            total += 1
        elif core[0].isalpha() and core.isascii():
            total += 1 if len(core) <= 8 else math.ceil(len(core) / 5)
        else:
            total += math.ceil(len(core) / 2)
    return total


def count_properties(schema):
    total = 0
    stack = [schema]
    while stack:
        s = stack.pop()
        if isinstance(s, dict):
            props = s.get("properties")
            if isinstance(props, dict):
                total += len(props)
            for k, v in s.items():
                if k in ("const", "enum", "examples", "default"):
                    continue
                if isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(s, list):
            stack.extend(s)
    return total


def schema_depth(schema):
    """Levels of nested object / array schemas (not following $ref)."""
    if not isinstance(schema, dict):
        return 0
    subs = list(schema.get("properties", {}).values()) + list(schema.get("$defs", {}).values())
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            subs.append(schema[key])
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        subs.extend(schema.get(key, []))
    deeper = max((schema_depth(x) for x in subs), default=0)
    own = 1 if schema.get("type") in ("object", "array") or "properties" in schema else 0
    return own + deeper


def nesting_depth(value):
    if isinstance(value, dict):
        return 1 + max((nesting_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting_depth(v) for v in value), default=0)
    return 0


def make_instance(schema, rng, max_depth, validator, overrides):
    """A valid instance in the token range, or None."""
    hooks = Realistic(overrides)
    for optional_p in (0.55, 0.4, 0.7, 0.25, 0.85, 0.15, 1.0, 0.08):
        for _ in range(4):
            gen = InstanceGenerator(schema, rng, hooks=hooks, optional_p=optional_p, extra_p=0.2,
                                    max_depth=max_depth)
            value = gen.generate()
            n = estimate_tokens(value)
            if MIN_TOKENS <= n <= MAX_TOKENS:
                error = jsoncheck.first_error(validator, value)
                assert error is None, f"invalid instance: {error}\n{json.dumps(schema)}\n{json.dumps(value)}"
                return value
    return None


PLAN = (
    [("family", f, i) for f in FAMILIES for i in range(10)]
    + [("geojson", "geojson", i) for i in range(6)]
    + [("k8s", "k8s", i) for i in range(10)]
    + [("tool", "tool", i) for i in range(20)]
    + [("large", "large", i) for i in range(20)]
    + [("recursive", "recursive", i) for i in range(20)]
)


def build_one(kind, family, index, attempt):
    rng = random.Random(f"{SEED}:{kind}:{family}:{index}:{attempt}")
    if kind == "family":
        b = compose(rng, family, FAMILIES[family], index)
    elif kind == "geojson":
        b = geojson(rng, index)
    elif kind == "k8s":
        b = k8s(rng, index)
    elif kind == "tool":
        b = tool(rng, index)
    elif kind == "large":
        b = large(rng, index)
    else:
        b = recursive(rng, index)
        b["hooks"] = REC_HOOKS.get(b["name"], {})
    return rng, b


def main():
    ap = argparse.ArgumentParser(description="Build the structured-output benchmark schema set.")
    ap.add_argument("--out", default=OUT_DEFAULT)
    ap.add_argument("--check", action="store_true", help="only compare with the existing --out file")
    args = ap.parse_args()

    records, names = [], collections.Counter()
    stats = collections.defaultdict(list)
    for kind, family, index in PLAN:
        for attempt in range(20):
            rng, b = build_one(kind, family, index, attempt)
            schema = b["schema"]
            bad = set(jsoncheck.keywords_used(schema)) - ALLOWED
            assert not bad, f"{kind}/{family}/{index}: keywords outside the set: {bad}"
            validator = jsoncheck.make_validator(schema)
            instance = make_instance(schema, rng, b["max_depth"], validator, b["hooks"])
            if instance is not None:
                break
        else:
            raise SystemExit(f"{kind}/{family}/{index}: no instance in {MIN_TOKENS}..{MAX_TOKENS} tokens")
        names[b["name"]] += 1
        name = "%s_%02d" % (b["name"], names[b["name"]])
        records.append({"id": len(records), "name": name, "schema": schema, "instance": instance})
        stats[kind].append((estimate_tokens(instance), count_properties(schema), nesting_depth(instance),
                            schema_depth(schema)))

    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            same = f.read() == text
        print(f"{args.out}: {'up to date' if same else 'DIFFERS from the generator output'}")
        return 0 if same else 1
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)

    print(f"wrote {len(records)} schemas to {args.out}")
    for kind, rows in stats.items():
        tokens = sorted(r[0] for r in rows)
        props = sorted(r[1] for r in rows)
        depth = sorted(r[2] for r in rows)
        sdepth = sorted(r[3] for r in rows)
        print(f"  {kind:10s} n={len(rows):3d} est_tokens {tokens[0]}..{tokens[-1]} (median {tokens[len(tokens) // 2]})"
              f"  properties {props[0]}..{props[-1]}  schema depth {sdepth[0]}..{sdepth[-1]}"
              f"  instance depth {depth[0]}..{depth[-1]}")
    used = collections.Counter()
    for r in records:
        used.update(jsoncheck.keywords_used(r["schema"]))
    print("  keywords:", ", ".join(f"{k}={v}" for k, v in sorted(used.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
