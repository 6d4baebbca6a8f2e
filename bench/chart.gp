# gnuplot script for bench/run.sh: gnuplot -e "data='X'; out='Y'; title='T'" chart.gp
set terminal pngcairo size 1400,900 font ",10" noenhanced
set output out
set title title
set style fill solid 0.7
set boxwidth 0.6
set ylabel "cost relative to the baseline (1 = baseline; lower is better)"
set logscale y
set grid ytics
set xtics rotate by 60 right
set key top left
plot data using 1:3:xtic(2) with boxes title "measured (median)", \
     data using 1:4 with points pt 7 ps 1.2 title "target"
