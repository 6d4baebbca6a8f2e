# gnuplot script for bench/lease_scale.sh:
#   gnuplot -e "dir='OUT_DIR'; title='T'; waiters='1000'; base='10'" lease_scale.gp
# Reads OUT_DIR/scale_cg.dat, scale_tps.dat and scale_waiters.dat (written
# by lease_scale.sh) and writes OUT_DIR/scale.png: four panels, instructions
# per operation and their ratio to the smallest live-lock count, tps relative
# to it, and tps with the waiters relative to none.
set terminal pngcairo size 1600,1100 font ",10" noenhanced
set output dir.'/scale.png'
cg = dir.'/scale_cg.dat'
tps = dir.'/scale_tps.dat'
wt = dir.'/scale_waiters.dat'

stats cg skip 1 nooutput
kinds = (STATS_columns - 1) / 2
stats tps skip 1 nooutput
tcols = STATS_columns

set multiplot layout 2,2 title title font ",13"
set grid
set logscale x 10
set format x "%.0f"
set xlabel "live locks (other locks with a live lease)"
set key top left box opaque

set title "instructions per operation (callgrind)"
set ylabel "instructions per operation"
set yrange [0:*]
plot for [c=2:1+kinds] cg using 1:c with linespoints lw 2 pt 7 ps 1.2 title columnheader(c)

set title "instructions per operation, ratio to ".base." live locks (goal: within the band)"
set ylabel "ratio to ".base." live locks"
set yrange [0.8:*]
plot 1.1 with lines dt 2 lc rgb "gray40" title "±10 %", \
     0.9 with lines dt 2 lc rgb "gray40" notitle, \
     for [c=2+kinds:1+2*kinds] cg using 1:c with linespoints lw 2 pt 7 ps 1.2 title columnheader(c)

set title "pgbench tps, ratio to ".base." live locks (median of the rounds; higher is better)"
set ylabel "tps ÷ tps at ".base." live locks"
set yrange [*:*]
plot 0.9 with lines dt 2 lc rgb "gray40" title "-10 %", \
     1.0 with lines lc rgb "gray70" notitle, \
     for [c=2:tcols] tps using 1:c with linespoints lw 2 pt 7 ps 1.2 dt (c % 2 == 0 ? 1 : 2) \
       lc (c / 2) title columnheader(c)

unset logscale x
set format x "%g"
set title "with ".waiters." waiters on the lock 'hot', ".base." live locks: tps ÷ tps without waiters"
set xlabel "kind, clients"
set ylabel "tps ÷ tps without waiters"
set yrange [0:*]
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.7 border -1
set xtics rotate by 30 right
set key top right
plot 0.9 with lines dt 2 lc rgb "gray40" title "-10 %", \
     wt using 2:xtic(1) title "tps ratio", \
     '' using 3 title "normalised by the bare UPDATE of the same round"
unset multiplot
