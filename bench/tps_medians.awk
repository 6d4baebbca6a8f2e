# Medians of benchmark CSV lines "benchmark,variant,clients,round,value,unit"
# per variant and client count, and each variant's median divided by the
# baseline's (-v baseline=VARIANT), one line per client count:
#   clients,<variant>...,<variant>/<baseline>...
# Variants appear in the order they first appear in the input.
#
# With -v within_rounds=1, instead: each variant's value divided by the
# baseline's of the same round and client count, and the median of those
# ratios, one line per client count:
#   clients,<variant>/<baseline>...
# A ratio within a round pairs runs made seconds apart, so a machine whose
# speed drifts between rounds (a disk's flush time, at fsync on) moves both
# sides of it; the ratio of medians does not pair them.
BEGIN { FS = "," }
{
  if (!($2 in seen)) { seen[$2] = 1; order[++variants] = $2 }
  if (!($3 in has_clients)) { has_clients[$3] = 1; clients[++nclients] = $3 }
  values[$2 "," $3] = values[$2 "," $3] " " $5
  by_round[$2 "," $3 "," $4] = $5
  if (!(($3 "," $4) in has_round)) { has_round[$3 "," $4] = 1; rounds[$3] = rounds[$3] " " $4 }
}
function median(list,   n, a, i, j, t) {
  n = split(list, a, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function within_round_ratios(   c, v, n, r, i, base, this, ratios, line) {
  line = "clients"
  for (v = 1; v <= variants; v++) if (order[v] != baseline) line = line "," order[v] "/" baseline
  print line
  for (c = 1; c <= nclients; c++) {
    line = clients[c]
    n = split(rounds[clients[c]], r, " ")
    for (v = 1; v <= variants; v++) {
      if (order[v] == baseline) continue
      ratios = ""
      for (i = 1; i <= n; i++) {
        base = by_round[baseline "," clients[c] "," r[i]]
        this = by_round[order[v] "," clients[c] "," r[i]]
        if (base != "" && this != "") ratios = ratios " " this / base
      }
      line = sprintf("%s,%.3f", line, median(ratios))
    }
    print line
  }
}
END {
  if (within_rounds) { within_round_ratios(); exit }
  line = "clients"
  for (v = 1; v <= variants; v++) line = line "," order[v]
  for (v = 1; v <= variants; v++) if (order[v] != baseline) line = line "," order[v] "/" baseline
  print line
  for (c = 1; c <= nclients; c++) {
    line = clients[c]
    base = median(values[baseline "," clients[c]])
    for (v = 1; v <= variants; v++) line = sprintf("%s,%.0f", line, median(values[order[v] "," clients[c]]))
    for (v = 1; v <= variants; v++) if (order[v] != baseline) line = sprintf("%s,%.3f", line, median(values[order[v] "," clients[c]]) / base)
    print line
  }
}
