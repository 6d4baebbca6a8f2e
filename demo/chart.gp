# gnuplot script for demo/chart.sh, which writes the data and meta files:
#   gnuplot -e "data='chart.dat'; meta='meta.gp'; out='chart.png'" chart.gp
# One panel per run of the demo: a lane per worker, its leases as bars with
# the token of each grant, the times it was stopped or killed, and its writes.
load meta
slot = 165     # pixels per run
header = 44    # pixels for the key
height = slot * runs + header
set terminal pngcairo size 1000, height font ",9" noenhanced
set output out

# Block 4*(k-1) + n of the data: n = 0 leases (lane, from, to, token,
# the worker's number in the run, which picks its colour),
# 1 stopped or killed (lane, from, to, 1 stopped | 2 killed), 2 writes that
# landed (t, lane, 1 if stale), 3 writes refused (t, lane, how many so far).
array lease_rgb[4] = [0x4c8bc9, 0x5aae61, 0x9e7cc1, 0xc08b5c]
lease_color(worker) = lease_rgb[int(worker - 1) % 4 + 1]
# The y of a pixel row counted from the top, as a screen coordinate.
from_top(px) = 1 - px / (height + 0.0)

set multiplot
set style fill solid 1 border lc rgb "#333333"
set grid xtics lc rgb "#dddddd"
set format x "%g s"
set ytics scale 0
set border 3
set xtics nomirror
set lmargin at screen 0.06
set rmargin at screen 0.985
do for [k = 1:runs] {
  top = header + slot * (k - 1)
  set tmargin at screen from_top(top + 30)
  set bmargin at screen from_top(top + slot - 22)
  set title runtitle[k] offset 0, -0.4
  set xrange [0 : xend[k] * 1.03 + 0.05]
  set yrange [0.45 : lanes[k] + 0.8]
  eval "set ytics " . yticlist[k]
  if (k == 1) {
    set key at screen 0.5, screen from_top(4) center top horizontal maxrows 2 samplen 2 width 3 reverse Left box lc rgb "#bbbbbb"
  } else {
    unset key
  }
  b = 4 * (k - 1)
  plot data index b using (($2 + $3) / 2):1:2:3:($1 - 0.2):($1 + 0.2):(lease_color($5)) \
         with boxxyerror lc rgb variable notitle, \
       data index b using 2:($1 + 0.36):(sprintf("token %d", $4)) with labels left offset 0.2, 0 notitle, \
       data index b + 1 using (($2 + $3) / 2):1:2:3:($1 - 0.07):($1 + 0.07):($4 == 1 ? 0xb0b0b0 : 0x222222) \
         with boxxyerror fs solid 1 noborder lc rgb variable notitle, \
       data index b + 2 using 1:2:($3 > 0 ? 9 : 7):($3 > 0 ? 0xff7f0e : 0x000000) \
         with points pt variable ps 1 lc rgb variable notitle, \
       data index b + 3 using 1:2 with points pt 2 ps 1.5 lw 2 lc rgb "#d62728" notitle, \
       keyentry with boxes fs solid 1 lc rgb "#4c8bc9" title "holds the lease (token of the grant)", \
       keyentry with boxes fs solid 1 noborder lc rgb "#b0b0b0" title "process stopped (SIGSTOP)", \
       keyentry with boxes fs solid 1 noborder lc rgb "#222222" title "process killed (kill -9)", \
       keyentry with points pt 7 ps 0.8 lc rgb "#000000" title "write landed", \
       keyentry with points pt 9 ps 1 lc rgb "#ff7f0e" title "stale write landed (no fence)", \
       keyentry with points pt 2 ps 1.5 lw 2 lc rgb "#d62728" title "write refused (55Z01)"
}
unset multiplot
