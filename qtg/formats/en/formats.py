"""The console's one way of writing a time: ISO date, 24-hour time to the second and the
time zone's name ("2026-12-03 12:42:07 UTC"), whatever Django's English locale would say
("Dec. 3, 2026, 12:42 p.m.", no zone). ``qtg.core.times.console_time`` writes the same from
Python."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = DATE_FORMAT
TIME_FORMAT = "H:i:s T"
