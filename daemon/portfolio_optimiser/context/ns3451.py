"""The names of NS 3451's building parts (bygningsdeler), to the second level.

A code a planner reads every day ("23") still reads better with its name beside it ("23
Yttervegger"); a deeper code (231) is named by its part. Pure data.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NS3451_NAMES", "ns3451_name"]

NS3451_NAMES: Final = {
    "1": "Felleskostnader",
    "2": "Bygning",
    "21": "Grunn og fundamenter",
    "22": "Bæresystemer",
    "23": "Yttervegger",
    "24": "Innervegger",
    "25": "Dekker",
    "26": "Yttertak",
    "27": "Fast inventar",
    "28": "Trapper og balkonger",
    "29": "Andre bygningsmessige deler",
    "3": "VVS-installasjoner",
    "31": "Sanitær",
    "32": "Varme",
    "33": "Brannslokking",
    "34": "Gass og trykkluft",
    "35": "Prosesskjøling",
    "36": "Luftbehandling",
    "37": "Komfortkjøling",
    "38": "Vannbehandling",
    "39": "Andre VVS-installasjoner",
    "4": "Elkraft",
    "41": "Basisinstallasjoner for elkraft",
    "42": "Høyspent forsyning",
    "43": "Lavspent forsyning",
    "44": "Lys",
    "45": "Elvarme",
    "46": "Reservekraft",
    "49": "Andre elkraftinstallasjoner",
    "5": "Tele og automatisering",
    "51": "Basisinstallasjoner for tele og automatisering",
    "52": "Integrert kommunikasjon",
    "53": "Telefoni og personsøking",
    "54": "Alarm- og signalsystemer",
    "55": "Lyd- og bildesystemer",
    "56": "Automatisering",
    "57": "Instrumentering",
    "59": "Andre installasjoner for tele og automatisering",
    "6": "Andre installasjoner",
    "61": "Prefabrikerte rom",
    "62": "Person- og varetransport",
    "63": "Transportanlegg for småvarer",
    "64": "Sceneteknisk utstyr",
    "65": "Avfall og støvsuging",
    "66": "Fastmontert spesialutrustning",
    "67": "Løs spesialutrustning",
    "69": "Andre tekniske installasjoner",
    "7": "Utendørs",
    "71": "Bearbeidet terreng",
    "72": "Utendørs konstruksjoner",
    "73": "Utendørs VVS",
    "74": "Utendørs elkraft",
    "75": "Utendørs tele og automatisering",
    "76": "Veger og plasser",
    "77": "Park og hage",
    "78": "Utendørs infrastruktur",
    "79": "Andre utendørs anlegg",
}


def ns3451_name(code: str) -> str | None:
    """The name of the building part ``code`` belongs to (``231`` → Yttervegger), or None."""
    digits = code.strip()
    if not digits.isdigit():
        return None
    return NS3451_NAMES.get(digits[:2]) or NS3451_NAMES.get(digits[:1])
